package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// runDirPrefix names the directories RunDir makes: duet-run-<pid>-<random>.
const runDirPrefix = "duet-run-"

// RunDir makes this gateway's directory for plugin sockets under base (os.TempDir() when empty) and returns
// it with the function that removes it. It first removes the directories of gateways that are no longer
// running (a gateway killed with SIGKILL cannot clean up after itself), so they never pile up.
func RunDir(base string) (string, func(), error) {
	if base == "" {
		base = os.TempDir()
	}
	sweepRunDirs(base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", runDirPrefix, os.Getpid()))
	if err != nil {
		return "", nil, fmt.Errorf("a directory for plugin sockets: %w", err)
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// sweepRunDirs removes run directories under base whose gateway process is gone.
func sweepRunDirs(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), runDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		os.RemoveAll(filepath.Join(base, e.Name()))
	}
}
