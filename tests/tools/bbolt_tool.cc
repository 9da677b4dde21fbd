// A small CLI over src/bbolt/, for tests that hand files to etcd's own
// tools (tests/integration/test_bbolt_etcd.py). One line per item, hex
// encoded, in key order:
//
//   B <name>          begin a bucket (nested in the open one)
//   P <key> [<value>] a key/value in the open bucket (no value: empty)
//   E                 end the open bucket
//
//   etcdq_bbolt_tool write OUT [--trailer] < lines   writes a bbolt file
//       (--trailer: then appends etcd's sha256 trailer)
//   etcdq_bbolt_tool dump FILE [--trailer]           prints the lines
//       (--trailer: checks and strips etcd's sha256 trailer first)
//
// Exit status 0 on success, 1 with the error on stderr.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "bbolt/reader.h"
#include "bbolt/snapshot_file.h"
#include "bbolt/writer.h"

namespace {

using etcdq::Error;

bool unhex(const std::string& h, std::string* out) {
  if (h.size() % 2) return false;
  out->clear();
  for (size_t i = 0; i < h.size(); i += 2) {
    int v = 0;
    if (std::sscanf(h.c_str() + i, "%2x", &v) != 1) return false;
    out->push_back(char(v));
  }
  return true;
}

std::string hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (unsigned char c : s) {
    o.push_back(d[c >> 4]);
    o.push_back(d[c & 15]);
  }
  return o;
}

int fail(const Error& e) {
  std::cerr << e.message() << "\n";
  return 1;
}

int write(const std::string& out, bool trailer) {
  etcdq::bbolt::Writer w;
  if (Error e = w.open(out)) return fail(e);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string op, a, b, ka, vb;
    in >> op >> a >> b;
    if (op.empty()) continue;
    if ((op == "B" || op == "P") && (!unhex(a, &ka) || !unhex(b, &vb))) {
      std::cerr << "bad hex in: " << line << "\n";
      return 1;
    }
    Error e;
    if (op == "B") e = w.begin_bucket(ka);
    else if (op == "P") e = w.put(ka, vb);
    else if (op == "E") e = w.end_bucket();
    else e = Error(etcdq::Code::kInvalidArgument, "unknown line: " + line);
    if (e) return fail(e);
  }
  if (Error e = w.finish()) return fail(e);
  if (trailer) {
    if (Error e = etcdq::bbolt::append_sha256_trailer(out)) return fail(e);
  }
  return 0;
}

class Printer : public etcdq::bbolt::Visitor {
 public:
  Error bucket_begin(int, std::string_view name) override {
    std::cout << "B " << hex(name) << "\n";
    return {};
  }
  Error key_value(std::string_view k, std::string_view v) override {
    std::cout << "P " << hex(k) << " " << hex(v) << "\n";
    return {};
  }
  Error bucket_end() override {
    std::cout << "E\n";
    return {};
  }
};

int dump(const std::string& path, bool trailer) {
  uint64_t db_bytes = 0;
  if (trailer) {
    if (Error e = etcdq::bbolt::check_sha256_trailer(path, &db_bytes)) return fail(e);
  }
  etcdq::bbolt::Reader r;
  if (Error e = r.open(path, db_bytes)) return fail(e);
  Printer p;
  if (Error e = r.walk(p)) return fail(e);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  bool trailer = argc > 3 && std::string(argv[3]) == "--trailer";
  if (argc >= 3 && cmd == "write") return write(argv[2], trailer);
  if (argc >= 3 && cmd == "dump") return dump(argv[2], trailer);
  std::cerr << "usage: etcdq_bbolt_tool write OUT [--trailer] < lines | dump FILE [--trailer]\n";
  return 2;
}
