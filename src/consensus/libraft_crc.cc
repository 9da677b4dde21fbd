// Patch 11 (consensus/libraft_patches.h): libraft's checksum through ISA-L.
//
// libraft 0.15's byteCrc32 (byte.c) checksums every entry batch it writes
// to a segment, sends and receives, and every snapshot file: the MSB-first
// CRC-32 (polynomial 0x04C11DB7, not reflected, the running value passed in
// and returned as is), one table lookup a byte, about 100 MB/s on this
// machine: 3.6% of a 3-member cluster's CPU under etcd's put benchmark, and
// 10 ms a MiB each time a large value is written, sent or read back
// (bench/RESULTS.md, "Three members under etcd's put benchmark"). ISA-L's
// crc32_ieee is the same CRC with the value inverted on entry and exit, so
// ~crc32_ieee(~init, ...) is libraft's value; it uses carry-less
// multiplication where the CPU has it (tens of GB/s). The unit test
// LibraftPatches.ChecksumIsLibraftsOwn compares the two.
#include <isa-l/crc.h>

#include <cstddef>
#include <cstdint>

extern "C" uint32_t __wrap_byteCrc32(const void* buf, size_t size, uint32_t init) {
  if (size == 0) return init;
  return ~crc32_ieee(~init, static_cast<const unsigned char*>(buf), size);
}
