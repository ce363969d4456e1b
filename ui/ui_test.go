package ui

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
)

// vendored maps each file under vendor/ to the file of its npm package it copies, byte for byte.
var vendored = map[string]string{
	"vendor/uplot/uPlot.esm.js":  "dist/uPlot.esm.js",
	"vendor/uplot/uPlot.min.css": "dist/uPlot.min.css",
	"vendor/uplot/LICENSE":       "LICENSE",
}

// TestVendoredUPlot: the chart library is the npm package's built file, unchanged, at the version
// testdata/node/package.json pins. To update: bump the version there (npm install --save-dev --save-exact
// uplot@X), then copy the three files again (see ui/README.md).
func TestVendoredUPlot(t *testing.T) {
	pkg := testnode.Module(t, "uplot")
	for ours, theirs := range vendored {
		got, err := fs.ReadFile(Files(), ours)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(pkg, theirs))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("ui/%s differs from uplot's %s: copy it again (ui/README.md)", ours, theirs)
		}
	}
	var fixtures struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	b, err := os.ReadFile(filepath.Join(testnode.Dir(t), "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fixtures); err != nil {
		t.Fatal(err)
	}
	v := fixtures.DevDependencies["uplot"]
	esm, _ := fs.ReadFile(Files(), "vendor/uplot/uPlot.esm.js")
	if v == "" || !bytes.Contains(esm[:min(len(esm), 400)], []byte("(v"+v+")")) {
		t.Errorf("package.json pins uplot %q; the vendored file's header does not name that version", v)
	}
}

// TestModulesResolve: every file the page links and every module a module imports is embedded, and every
// embedded script is reached from the page (no dead files).
func TestModulesResolve(t *testing.T) {
	index, err := fs.ReadFile(Files(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	reached := map[string]bool{"index.html": true}
	var visit func(p string)
	visit = func(p string) {
		if reached[p] {
			return
		}
		reached[p] = true
		b, err := fs.ReadFile(Files(), p)
		if err != nil {
			t.Errorf("%s is linked or imported but not embedded", p)
			return
		}
		if path.Ext(p) != ".js" {
			return
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*import\b[^'"]*['"]([^'"]+)['"]`).FindAllSubmatch(b, -1) {
			spec := string(m[1])
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: only relative imports resolve in the browser without a build step", p, spec)
				continue
			}
			visit(path.Join(path.Dir(p), spec))
		}
	}
	for _, m := range regexp.MustCompile(`(?:href|src)="/ui/([^"]+)"`).FindAllSubmatch(index, -1) {
		visit(string(m[1]))
	}
	_ = fs.WalkDir(Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !reached[p] && p != "vendor/uplot/LICENSE" {
			t.Errorf("%s is embedded but nothing links or imports it", p)
		}
		return err
	})
}

// TestOnlyThisGateway: the dashboard's own files name no other host, and no script loads code or data from
// anywhere but relative URLs (the server's Content-Security-Policy enforces it in the browser too).
func TestOnlyThisGateway(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	_ = fs.WalkDir(Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, "vendor/") {
			return err
		}
		b, _ := fs.ReadFile(Files(), p)
		for _, m := range url.FindAll(b, -1) {
			if string(m) == "http://www.w3.org" { // the SVG namespace, not a request
				continue
			}
			t.Errorf("%s names another host: %s", p, m)
		}
		if bytes.Contains(b, []byte("innerHTML")) || bytes.Contains(b, []byte("eval(")) {
			t.Errorf("%s builds markup or code from strings", p)
		}
		return nil
	})
	esm, _ := fs.ReadFile(Files(), "vendor/uplot/uPlot.esm.js")
	for _, call := range []string{"fetch(", "XMLHttpRequest", "import(", "new Function", "eval("} {
		if bytes.Contains(esm, []byte(call)) {
			t.Errorf("the chart library calls %s", call)
		}
	}
}

// TestStats runs testdata/stats_test.mjs: table tests of js/stats.js, the aggregations behind the routes' and
// requests' figures and the timeline's layout.
func TestStats(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("testdata", "stats_test.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	out := testnode.Run(t, script, nil)
	if !bytes.Contains(out, []byte("stats: ok")) {
		t.Fatalf("stats_test.mjs: %s", out)
	}
}
