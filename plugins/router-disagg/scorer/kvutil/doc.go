// Package kvutil scores decode instances by the KV-cache memory they have left, so that long generations go
// where they will not be preempted or evicted.
//
// Formula: score = 1 − clamp(KVUtilization, 0, 1). A NaN utilisation counts as full (score 0): a figure that
// cannot be read is no reason to prefer an instance.
//
// The figure comes from the snapshot, so a profile scores once per snapshot (sched.ScopeSnapshot).
package kvutil
