package pluginhost

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Catalog is the plugins of one kind the operator registered at start, by name: the built-ins, the paths
// given on the command line, and the executables of a plugin directory. It is all a request may choose from:
// a request names a registered plugin, never a path, so no request chooses what runs on the machine. Each
// external plugin is pinned by its SHA-256 when it is registered (or by the pin the operator gives), and the
// pin is checked again before every start (Spec.Checksum), so a binary replaced after start is refused.
type Catalog struct {
	kind    string
	entries map[string]Plugin
}

// Plugin is one registered plugin.
type Plugin struct {
	Name string
	// Path is the external plugin's binary; empty for a built-in.
	Path string
	// SHA256 pins the external binary; nil for a built-in.
	SHA256 []byte
}

// Builtin says whether the plugin is compiled into duet.
func (p Plugin) Builtin() bool { return p.Path == "" }

// ErrNotRegistered is the error of a name the operator did not register.
var ErrNotRegistered = errors.New("not a registered plugin")

// NewCatalog returns an empty catalog of plugins of the kind named ("router", "engine").
func NewCatalog(kind string) *Catalog { return &Catalog{kind: kind, entries: map[string]Plugin{}} }

// AddBuiltin registers a plugin compiled into duet.
func (c *Catalog) AddBuiltin(name string) { c.entries[name] = Plugin{Name: name} }

// AddFile registers the executable at path under its file name and returns it. A pin, when given, must be
// the file's SHA-256 now; without one the file's current SHA-256 becomes its pin.
func (c *Catalog) AddFile(path string, pin []byte) (Plugin, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Plugin{}, err
	}
	st, err := os.Stat(abs)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return Plugin{}, fmt.Errorf("%s plugin %s: not an executable file", c.kind, abs)
	}
	sum, err := FileSHA256(abs)
	if err != nil {
		return Plugin{}, fmt.Errorf("%s plugin %s: %w", c.kind, abs, err)
	}
	if pin != nil && !bytes.Equal(pin, sum) {
		return Plugin{}, fmt.Errorf("%s plugin %s has SHA-256 %x, but %x is pinned; it was not run", c.kind, abs, sum, pin)
	}
	p := Plugin{Name: filepath.Base(abs), Path: abs, SHA256: sum}
	if old, ok := c.entries[p.Name]; ok && old.Path != p.Path {
		what := "a built-in " + c.kind
		if !old.Builtin() {
			what = old.Path
		}
		return Plugin{}, fmt.Errorf("%s plugin %s: its name %q is taken by %s; rename the file", c.kind, abs, p.Name, what)
	}
	c.entries[p.Name] = p
	return p, nil
}

// AddDir registers every executable regular file directly in dir (symbolic links to one included), each
// under its file name. Hidden files and other entries are skipped.
func (c *Catalog) AddDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("plugin directory: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		if _, err := c.AddFile(path, nil); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the plugin registered under name. A path, or a name nobody registered, is refused with an
// error wrapping ErrNotRegistered that lists the registered names.
func (c *Catalog) Lookup(name string) (Plugin, error) {
	if p, ok := c.entries[name]; ok {
		return p, nil
	}
	if strings.ContainsAny(name, `/\`) {
		return Plugin{}, fmt.Errorf("%w: %s %q is a path; a %s is chosen by the name the operator registered at start (%s)",
			ErrNotRegistered, c.kind, name, c.kind, strings.Join(c.Names(), ", "))
	}
	return Plugin{}, fmt.Errorf("%w: no %s %q; the registered ones are %s (duet --plugin-dir adds more)",
		ErrNotRegistered, c.kind, name, strings.Join(c.Names(), ", "))
}

// Names are the registered names, sorted.
func (c *Catalog) Names() []string {
	out := make([]string, 0, len(c.entries))
	for n := range c.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// FileSHA256 is the SHA-256 of a file's contents.
func FileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
