// Relays one output stream of one rank (its stdout or its stderr) to one of
// kolorun's own, a line at a time, each line prefixed with the rank ("[3] ").
//
// Whole lines only, so that lines of different ranks never mix mid-line.
// '\r' ends a line too (and keeps its '\r'), so a rank's progress bar still
// redraws in place: "[0] 10%\r[0] 20%\r". A partial last line is written by
// finish(), when the rank's end of the pipe closes; with a prefix it gets a
// '\n' so that the next rank's line starts on a line of its own, without one
// (--no-tag-output) the bytes stay exactly as the rank wrote them.
#pragma once

#include <string>
#include <string_view>

namespace kolorun {

// Where the bytes of one stream of one rank go: a LineRelay to kolorun's own
// output, a file, or (in a host's agent) frames to the launching kolorun.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  virtual void feed(std::string_view data) = 0;
  // The rank's end of the stream closed.
  virtual void finish() = 0;
};

class LineRelay : public OutputSink {
 public:
  // prefix: "[r] ", or "" for --no-tag-output. dest_fd is not owned.
  LineRelay(std::string prefix, int dest_fd) : prefix_(std::move(prefix)), dest_(dest_fd) {}

  void feed(std::string_view data) override;
  void finish() override;

 private:
  // Appends text to out, with the prefix when it starts a line.
  void append_segment(std::string& out, std::string_view text, bool ends_line);
  void write_out(const std::string& out);

  std::string prefix_;
  int dest_;
  std::string pending_;     // the current line, not yet ended
  bool mid_line_ = false;   // part of the current line was already written
  bool after_cr_ = false;   // the last line written ended in '\r'
  bool dest_broken_ = false;
};

}  // namespace kolorun
