// torch_rank_prog: the rank side of kolo_torch's tests. torch_test (the
// GoogleTest driver) and timeline.torch run it under kolorun in one of several
// modes and assert on the files it writes, its output and its exit status.
// Each mode's rank program lives in the file named for its feature (the table
// below); what they share is in prog_common.h. This file reads the command line
// and runs the mode.
//
// Exit status: 0 ok, 2 a check failed (message on stderr), 3 an exception
// (its text on stderr, which the driver asserts on), 64 a usage error.
#include "prog_common.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

namespace {

struct Entry {
  const char* name;
  prog::Mode run;
};

const Entry kModes[] = {
    // prog_training.cc
    {"equiv", prog::mode_equiv},
    {"scaler", prog::mode_scaler},
    {"unused", prog::mode_unused},
    {"sparse", prog::mode_sparse},
    {"device", prog::mode_device},
    {"lr", prog::mode_lr},
    {"optstate", prog::mode_optstate},
    // prog_checkpoint.cc
    {"resume", prog::mode_resume},
    {"ckpt_kill", prog::mode_ckpt_kill},
    {"ckpt_load", prog::mode_ckpt_load},
    {"ckpt_save", prog::mode_ckpt_save},
    // prog_tensors.cc
    {"tensors", prog::mode_tensors},
    {"bad_tensors", prog::mode_bad_tensors},
    {"mismatch", prog::mode_mismatch},
    {"loader", prog::mode_loader},
    // prog_batchnorm.cc
    {"syncbn", prog::mode_syncbn},
    {"bufbcast", prog::mode_bufbcast},
    // prog_join.cc
    {"join", prog::mode_join},
    {"join_ref", prog::mode_join_ref},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: torch_rank_prog MODE [--key value | --flag]...\n");
    return 64;
  }
  const std::string mode = argv[1];
  prog::Args a;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) {
      std::fprintf(stderr, "bad argument %s\n", argv[i]);
      return 64;
    }
    k = k.substr(2);
    if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0)
      a.kv[k] = argv[++i];
    else
      a.kv[k] = "1";
  }
  torch::set_num_threads(1);
  try {
    auto comm = kolo::init();
    for (const auto& m : kModes)
      if (mode == m.name) return m.run(comm, a);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 64;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 3;
  }
}
