#include "rendezvous/elastic.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace kolo::rdv::elastic {

namespace {

constexpr const char* kLatest = "kolo/elastic/latest";

std::string gen_key(int g) { return fmt::format("kolo/elastic/gen{}", g); }

std::vector<Member> parse(const std::string& text, int g) {
  std::vector<Member> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    if (sp == std::string::npos || sp == 0) fail("elastic: generation {} has a malformed member line '{}'", g, line);
    out.push_back({line.substr(0, sp), line.substr(sp + 1)});
  }
  return out;
}

int to_generation(const std::string& v) {
  try {
    std::size_t used = 0;
    const int g = std::stoi(v, &used);
    if (used == v.size() && g >= 0) return g;
  } catch (const std::exception&) {
  }
  fail("elastic: {} holds '{}', not a generation number", kLatest, v);
}

}  // namespace

std::string prefix(int generation) { return fmt::format("kolo/elastic/g{}", generation); }

int latest(StoreClient& store) {
  if (!store.check({kLatest})) return -1;
  return to_generation(store.get(kLatest, Millis(0)));
}

Place join(StoreClient& store, const std::string& worker, int after, Millis timeout) {
  store.set("kolo/elastic/ready/" + worker, "1");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Polled: a generation comes seconds apart at most, and a poll is one
  // round trip to a store on the launcher's host.
  for (;;) {
    const int g = latest(store);
    if (g > after) {
      const std::vector<Member> members = parse(store.get(gen_key(g), timeout), g);
      Place p;
      p.generation = g;
      p.size = static_cast<int>(members.size());
      for (int r = 0; r < p.size; ++r) {
        if (members[r].worker == worker) {
          p.rank = r;
          return p;
        }
      }
      // A worker that has been a member and is not listed was dropped (its
      // host was lost); a new one waits for the generation that adds it.
      if (after >= 0)
        fail("elastic: this process (worker {}) is no longer part of the job: generation {} of {} workers "
             "does not list it (kolorun dropped it, its host was lost?)",
             worker, g, p.size);
    }
    if (std::chrono::steady_clock::now() >= deadline)
      fail("elastic: no generation of the job listed worker {} within {} s (newest: {}); is kolorun alive, and "
           "are there at least --min-np workers?",
           worker, std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), g);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void mark_formed(StoreClient& store, const std::string& worker, int generation) {
  store.set("kolo/elastic/formed/" + worker, std::to_string(generation));
}

bool has_formed(StoreClient& store, const std::string& worker) {
  return store.check({"kolo/elastic/formed/" + worker});
}

bool ready(StoreClient& store, const std::string& worker) { return store.check({"kolo/elastic/ready/" + worker}); }

int publish(StoreClient& store, int generation, const std::vector<Member>& members) {
  std::string text;
  for (const auto& m : members) {
    if (m.worker.empty() || m.worker.find_first_of(" \n") != std::string::npos ||
        m.host.find('\n') != std::string::npos)
      fail("elastic: worker id '{}' on host '{}' cannot be published (no spaces or newlines)", m.worker, m.host);
    text += m.worker + " " + m.host + "\n";
  }
  store.set(gen_key(generation), text);
  store.set(kLatest, std::to_string(generation));
  return generation;
}

}  // namespace kolo::rdv::elastic
