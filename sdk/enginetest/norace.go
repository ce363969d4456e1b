//go:build !race

package enginetest

// raceSlowdown is 1 without the race detector (see race.go).
const raceSlowdown = 1
