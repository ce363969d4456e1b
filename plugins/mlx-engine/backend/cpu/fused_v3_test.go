//go:build amd64.v3

package cpu

// fusedBuild: built with GOAMD64=v3 or later, where the compiler fuses x*y+z into one rounding (FMA).
const fusedBuild = true
