#include "cli/snapshot_restore.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "common/progress.h"
#include "etcd_snapshot/restore.h"
#include "member/identity.h"
#include "member/member.h"

namespace etcdq::cli {
namespace {

constexpr const char* kUsage =
    "Usage: etcdq snapshot restore <filename> [flags]\n"
    "\n"
    "Restores an etcd member snapshot (taken by `etcdctl snapshot save` from etcd or etcdq)\n"
    "into an etcdq data dir, keeping every revision it holds. Run once per member of the new cluster.\n"
    "\n"
    "Flags:\n"
    "  --name string                          human-readable name for this member (default \"default\")\n"
    "  --data-dir string                      path to the data directory (default \"<name>.etcdq\")\n"
    "  --initial-cluster string               initial cluster configuration for restore bootstrap\n"
    "                                         (default \"default=http://localhost:2380\")\n"
    "  --initial-cluster-token string         initial cluster token for the etcd cluster during restore\n"
    "                                         bootstrap (default \"etcd-cluster\")\n"
    "  --initial-advertise-peer-urls string   list of this member's peer URLs to advertise to the rest of\n"
    "                                         the cluster (default \"http://localhost:2380\")\n"
    "  --skip-hash-check                      ignore snapshot integrity hash value (required if copied\n"
    "                                         from data directory)\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "Error: %s\n\n%s", msg.c_str(), kUsage);
  return 1;
}

std::vector<std::string> split_urls(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

struct RestoreFlags {
  std::string file;
  std::string name = "default";
  std::string data_dir;
  std::string initial_cluster = "default=http://localhost:2380";
  std::string token = "etcd-cluster";
  std::string advertise_peer = "http://localhost:2380";
  bool skip_hash_check = false;
};

// "--flag value" or "--flag=value", as etcdctl (cobra/pflag) takes them;
// --skip-hash-check alone means true.
Error parse(int argc, char** argv, RestoreFlags* f, bool* help) {
  *help = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      *help = true;
      return {};
    }
    if (!a.starts_with("--")) {
      if (!f->file.empty()) return {Code::kInvalidArgument, "snapshot restore expects one argument"};
      f->file = a;
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "skip-hash-check") {
      if (has_value && value != "true" && value != "false") {
        return {Code::kInvalidArgument, "invalid argument \"" + value + "\" for \"--skip-hash-check\" flag"};
      }
      f->skip_hash_check = !has_value || value == "true";
      continue;
    }
    std::string* dst = nullptr;
    if (name == "name") dst = &f->name;
    else if (name == "data-dir") dst = &f->data_dir;
    else if (name == "initial-cluster") dst = &f->initial_cluster;
    else if (name == "initial-cluster-token") dst = &f->token;
    else if (name == "initial-advertise-peer-urls") dst = &f->advertise_peer;
    if (dst == nullptr) return {Code::kInvalidArgument, "unknown flag: --" + name};
    if (!has_value) {
      if (i + 1 >= argc) return {Code::kInvalidArgument, "flag needs an argument: --" + name};
      value = argv[++i];
    }
    *dst = value;
  }
  if (f->file.empty()) return {Code::kInvalidArgument, "snapshot restore expects one argument"};
  if (f->data_dir.empty()) f->data_dir = f->name + ".etcdq";
  return {};
}

// The ids etcd gives this member and the cluster, after etcd's bootstrap
// checks (etcdserver/config.go VerifyBootstrap): the name is in the initial
// cluster with exactly the advertised peer URLs.
Error compute_ids(const RestoreFlags& f, uint64_t* member_id, uint64_t* cluster_id) {
  std::vector<std::pair<std::string, Url>> initial;
  if (Error e = parse_initial_cluster(f.initial_cluster, &initial)) return e;
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> urls;
  for (const auto& [name, url] : initial) {
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      names.push_back(name);
      urls.emplace_back();
      it = std::prev(names.end());
    }
    urls[it - names.begin()].push_back(url.text);
  }
  auto self = std::find(names.begin(), names.end(), f.name);
  if (self == names.end()) {
    return {Code::kInvalidArgument,
            "couldn't find local name \"" + f.name + "\" in the initial cluster configuration"};
  }
  std::vector<std::string> advertised = split_urls(f.advertise_peer);
  for (const auto& u : advertised) {
    Url parsed;
    if (Error e = parse_url(u, &parsed)) return {Code::kInvalidArgument, "--initial-advertise-peer-urls: " + e.message()};
  }
  std::vector<std::string> mine = urls[self - names.begin()];
  std::sort(mine.begin(), mine.end());
  std::sort(advertised.begin(), advertised.end());
  if (mine != advertised) {
    std::string joined;
    for (const auto& u : advertised) joined += (joined.empty() ? "" : ",") + u;
    std::string have;
    for (const auto& u : mine) have += (have.empty() ? "" : ",") + u;
    return {Code::kInvalidArgument, "--initial-cluster has " + f.name + "=" + have +
                                        " but missing from --initial-advertise-peer-urls=" + joined};
  }
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < names.size(); ++i) {
    uint64_t id = member::member_id(urls[i], f.token);
    if (names[i] == f.name) *member_id = id;
    ids.push_back(id);
  }
  *cluster_id = member::cluster_id(ids);
  return {};
}

// How far a restore is, 0 to 1: the file's pages read of all of them
// (the key bucket, read in one pass, is most of them).
double restore_fraction(const etcd_snapshot::RestoreOptions::Progress& p) {
  if (p.bytes_total == 0) return 0;
  return std::min(1.0, static_cast<double>(p.bytes_read) / static_cast<double>(p.bytes_total));
}

// The progress bar `etcdq snapshot restore` draws on a terminal (stderr):
// one line, redrawn in place with a carriage return, ended by finish().
class RestoreBar {
 public:
  RestoreBar(bool on, std::chrono::steady_clock::time_point t0) : on_(on), t0_(t0) {}
  bool on() const { return on_; }
  // An empty bar, before anything is read.
  void start() {
    if (on_) draw_at(0, 0);
  }
  void draw(const etcd_snapshot::RestoreOptions::Progress& p) { draw_at(restore_fraction(p), p.revisions); }
  // After the restore: a full bar when it succeeded, and the line ended.
  void finish(bool ok, int64_t revisions) {
    if (!on_ || !drawn_) return;
    if (ok) draw_at(1.0, revisions);
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  static constexpr int kWidth = 30;
  void draw_at(double fraction, int64_t revisions) {
    drawn_ = true;
    int filled = static_cast<int>(fraction * kWidth);
    std::string line = "\rrestoring [" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "] ";
    char tail[128];
    std::snprintf(tail, sizeof tail, "%3d%%  %lld key revisions, %.1f s", static_cast<int>(100 * fraction),
                  static_cast<long long>(revisions),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
    line += tail;
    // Blanks over what a longer line drawn before left.
    const size_t len = line.size();
    if (len < widest_) line.append(widest_ - len, ' ');
    widest_ = std::max(widest_, len);
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  bool on_;
  std::chrono::steady_clock::time_point t0_;
  bool drawn_ = false;
  size_t widest_ = 0;
};

int restore_main(int argc, char** argv) {
  RestoreFlags f;
  bool help = false;
  if (Error e = parse(argc, argv, &f, &help)) return usage_error(e.message());
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  etcd_snapshot::RestoreOptions o;
  uint64_t member_id = 0, cluster_id = 0;
  if (Error e = compute_ids(f, &member_id, &cluster_id)) {
    std::fprintf(stderr, "Error: %s\n", e.message().c_str());
    return 1;
  }
  o.snapshot_path = f.file;
  o.data_dir = f.data_dir;
  o.skip_hash_check = f.skip_hash_check;
  // A new database: keep_identity stores the ids and the token.
  o.store_identity = [&](storage::Engine* engine) {
    uint64_t member = member_id, cluster = cluster_id;
    member::keep_identity(engine, &member, &cluster, f.token);
  };
  auto t0 = std::chrono::steady_clock::now();
  // Start, progress (at most once a second, or a bar on a terminal) and end on stderr, as the
  // summary below is stdout's.
  std::error_code size_ec;
  const auto file_bytes = std::filesystem::file_size(f.file, size_ec);
  std::fprintf(stderr, "restoring snapshot %s (%llu bytes) into %s\n", f.file.c_str(),
               size_ec ? 0ULL : static_cast<unsigned long long>(file_bytes), f.data_dir.c_str());
  // On a terminal, a bar redrawn in place (at most 10 times a second);
  // else a line at most once a second (common/progress.h).
  RestoreBar bar(::isatty(STDERR_FILENO) == 1, t0);
  o.progress_every = bar.on() ? std::min(std::chrono::milliseconds(100), common::progress_interval())
                              : common::progress_interval();
  bar.start();
  o.on_progress = [&bar, t0](const etcd_snapshot::RestoreOptions::Progress& p) {
    if (bar.on()) return bar.draw(p);
    std::fprintf(stderr,
                 "restoring: %lld key revisions copied, at revision %lld, %llu of %llu bytes read (%d%%), %.1f s\n",
                 static_cast<long long>(p.revisions), static_cast<long long>(p.revision),
                 static_cast<unsigned long long>(p.bytes_read), static_cast<unsigned long long>(p.bytes_total),
                 static_cast<int>(100 * restore_fraction(p)),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  etcd_snapshot::RestoreStats s;
  member::add_key_spaces();  // their records are rebuilt too
  Error restored = etcd_snapshot::restore_etcd_snapshot(o, &s);
  bar.finish(!restored, s.revisions);
  if (restored) {
    std::fprintf(stderr, "Error: %s\n", restored.message().c_str());
    return 1;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t db_bytes = 0;  // the new data dir's files
  std::error_code walk_ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(f.data_dir, walk_ec)) {
    std::error_code size_ec;
    if (entry.is_regular_file(size_ec)) db_bytes += entry.file_size(size_ec);
  }
  std::fprintf(stderr, "finished restoring snapshot %s: %lld key revisions, %llu bytes in %s, took %.2f s\n",
               f.file.c_str(), static_cast<long long>(s.revisions), static_cast<unsigned long long>(db_bytes),
               f.data_dir.c_str(), secs);
  std::printf(
      "restored snapshot %s into %s: member %llx of cluster %llx, revision %lld, compacted at %lld, %lld revisions, "
      "%lld keys, %lld leases (%.2f s)\n",
      f.file.c_str(), f.data_dir.c_str(), static_cast<unsigned long long>(member_id),
      static_cast<unsigned long long>(cluster_id), static_cast<long long>(s.revision),
      static_cast<long long>(s.compact_revision), static_cast<long long>(s.revisions), static_cast<long long>(s.keys),
      static_cast<long long>(s.leases), secs);
  if (s.auth_users > 0 || s.auth_roles > 0 || s.auth_enabled) {
    std::printf("kept %lld users and %lld roles (auth %s)\n", static_cast<long long>(s.auth_users),
                static_cast<long long>(s.auth_roles), s.auth_enabled ? "enabled" : "disabled");
  }
  for (const auto& note : s.plugin_notes) std::printf("%s\n", note.c_str());
  return 0;
}

}  // namespace

int snapshot_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "restore") == 0) return restore_main(argc - 2, argv + 2);
  std::fprintf(stderr,
               "Usage: etcdq snapshot restore <filename> [flags]\n"
               "(etcdq serves snapshots itself: take one with `etcdctl snapshot save`; "
               "`etcdctl snapshot status` reads it)\n");
  return 1;
}

}  // namespace etcdq::cli
