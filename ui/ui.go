// Package ui is the dashboard the gateway serves at /: plain HTML, CSS and ES modules, with no build step,
// embedded in the duet binary so that a fresh clone serves it as it is. Each view is one module under js/views;
// the page talks to its own gateway only (the server sends a Content-Security-Policy of 'self').
//
// vendor/uplot is the chart library, copied byte for byte from the npm package testdata/node/package.json
// pins (ui_test.go checks the copy).
package ui

import (
	"embed"
	"io/fs"
)

//go:embed index.html style.css favicon.svg js vendor
var files embed.FS

// Files returns the dashboard's files: index.html at the root, the rest beside it as the page links them
// (under /ui/).
func Files() fs.FS { return files }
