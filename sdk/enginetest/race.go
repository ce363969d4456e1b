//go:build race

package enginetest

// raceSlowdown scales the default deadline of each check: the race detector makes an engine's kernels
// (plain Go loops over slices) some twenty times slower, and a busy CI machine runs several packages at
// once. The deadline is there to catch a hang, not to time the engine.
const raceSlowdown = 5
