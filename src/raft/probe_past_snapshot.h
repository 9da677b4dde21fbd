// Where a leader resumes replication to a follower after a snapshot: one
// index past the snapshot, as libraft intends, not at the snapshot.
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a) moves a follower it is sending a snapshot to back to probing
// when a send to it fails (replication.c, sendAppendEntriesCb) or once it
// reports the snapshot's index (the AppendEntries result). progressToProbe
// (progress.c) then sets next index = max(match + 1, snapshot index), while
// its comment says it probes from snapshot index + 1. A follower killed as
// its install started and restarted at once holds only that snapshot: it has
// no entry at the probe's previous index (snapshot index - 1) and rejects;
// its last index is above the rejected one, so the leader steps back one
// index a heartbeat until it runs off its own log and sends the snapshot
// again (--snapshot-count heartbeats: 2.5-3 s here, up to 2048 heartbeats).
// Upstream's HEAD still has it.
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap=progressToProbe, so libraft's calls to progressToProbe from its
// other objects reach __wrap_progressToProbe below, which calls the original
// (__real_progressToProbe) and, when the follower left the snapshot state,
// raises its next index to snapshot index + 1. A follower that has the
// snapshot then accepts the first probe; one that lacks it rejects at the
// snapshot's index with its own last index, which the leader jumps back to
// (sending the snapshot again if its log no longer reaches there). The one call inside
// progress.c itself (progressMaybeDecrement, from pipeline state, where the
// original is right) is not redirected: the linker wraps only references
// between objects.
//
// Relies on libraft 0.15's layout: struct raft_progress (public, raft.h) and
// its snapshot state's value, 2 (PROGRESS__SNAPSHOT, libraft's internal
// progress.h). CMakeLists.txt refuses any libraft other than 0.15.0.
//
// Thread-safety: called by libraft on the consensus thread only, like the
// original; touches only the leader's progress entry i.
#pragma once

extern "C" {
#include <raft.h>
}

extern "C" {
// libraft's own function (progress.c), reached under this name by the wrap.
void __real_progressToProbe(struct raft* r, unsigned i);
// What libraft's progressToProbe calls reach: r is a leader, i a server's
// index in its configuration (libraft's caller checked both).
void __wrap_progressToProbe(struct raft* r, unsigned i);
}
