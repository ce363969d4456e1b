package hubtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, method, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestServerSpeaksLikeTheHub(t *testing.T) {
	t.Parallel()
	s := hubtest.NewServer(t)
	weights := strings.Repeat("w", 1000)
	commit := s.AddRepo("org/m", hubtest.RepoOptions{}).Commit(map[string][]byte{
		"config.json": []byte(`{"a": 1}`), "model.safetensors": []byte(weights),
	})

	resp, body := do(t, "GET", s.URL+"/api/models/org/m/revision/main?blobs=true", nil)
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      int    `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int    `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil || resp.StatusCode != 200 {
		t.Fatalf("model info: %d %s %v", resp.StatusCode, body, err)
	}
	if info.SHA != commit || len(info.Siblings) != 2 || info.Siblings[0].BlobID != hubtest.GitBlobID([]byte(`{"a": 1}`)) ||
		info.Siblings[1].LFS == nil || info.Siblings[1].LFS.SHA256 != hubtest.SHA256([]byte(weights)) || info.Siblings[1].LFS.Size != 1000 {
		t.Errorf("model info = %+v", info)
	}

	tests := []struct {
		name, method, path string
		header             map[string]string
		status             int
		want               map[string]string
		body               string
	}{
		{name: "small file", method: "GET", path: "/org/m/resolve/main/config.json", status: 200,
			want: map[string]string{"ETag": `"` + hubtest.GitBlobID([]byte(`{"a": 1}`)) + `"`, "X-Repo-Commit": commit}, body: `{"a": 1}`},
		{name: "LFS redirect", method: "HEAD", path: "/org/m/resolve/" + commit + "/model.safetensors", status: 302,
			want: map[string]string{"X-Linked-Etag": `"` + hubtest.SHA256([]byte(weights)) + `"`, "X-Linked-Size": "1000"}},
		{name: "range", method: "GET", path: "/org/m/resolve/main/config.json", header: map[string]string{"Range": "bytes=2-"}, status: 206,
			want: map[string]string{"Content-Range": "bytes 2-7/8"}, body: `a": 1}`},
		{name: "range past the end", method: "GET", path: "/org/m/resolve/main/config.json", header: map[string]string{"Range": "bytes=8-"}, status: 416,
			want: map[string]string{"Content-Range": "bytes */8"}},
		{name: "missing repo", method: "GET", path: "/api/models/org/x/revision/main", status: 404, want: map[string]string{"X-Error-Code": "RepoNotFound"}},
		{name: "missing revision", method: "GET", path: "/org/m/resolve/nope/config.json", status: 404, want: map[string]string{"X-Error-Code": "RevisionNotFound"}},
		{name: "missing file", method: "GET", path: "/org/m/resolve/main/nope.json", status: 404, want: map[string]string{"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, s.URL+tt.path, tt.header)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			for k, v := range tt.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tt.body != "" && body != tt.body {
				t.Errorf("body %q, want %q", body, tt.body)
			}
		})
	}

	// The LFS redirect leads to the storage host, which serves the contents and ranges of them.
	resp, _ = do(t, "HEAD", s.URL+"/org/m/resolve/main/model.safetensors", nil)
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, s.StorageURL+"/") {
		t.Fatalf("Location %q is not on the storage host %s", loc, s.StorageURL)
	}
	resp, body = do(t, "GET", loc, map[string]string{"Range": "bytes=990-"})
	if resp.StatusCode != 206 || body != strings.Repeat("w", 10) {
		t.Errorf("storage range: %d %q", resp.StatusCode, body)
	}
}

func TestServerFaults(t *testing.T) {
	t.Parallel()
	s := hubtest.NewServer(t)
	data := strings.Repeat("0123456789", 100)
	s.AddRepo("org/m", hubtest.RepoOptions{}).Commit(map[string][]byte{"a.json": []byte(data)})
	url := s.URL + "/org/m/resolve/main/a.json"
	tests := []struct {
		name   string
		fault  hubtest.Fault
		header map[string]string
		status int
		check  func(body string) bool
	}{
		{"status", hubtest.Fault{Status: 503}, nil, 503, func(string) bool { return true }},
		{"corrupt", hubtest.Fault{Corrupt: true}, nil, 200, func(b string) bool { return len(b) == len(data) && b != data }},
		{"ignore range", hubtest.Fault{IgnoreRange: true}, map[string]string{"Range": "bytes=10-"}, 200, func(b string) bool { return b == data }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.SetFault(func(hubtest.FileRequest) hubtest.Fault { return tt.fault })
			defer s.SetFault(nil)
			resp, body := do(t, "GET", url, tt.header)
			if resp.StatusCode != tt.status || !tt.check(body) {
				t.Errorf("status %d body %q", resp.StatusCode, body)
			}
		})
	}
	t.Run("drop", func(t *testing.T) {
		s.SetFault(func(hubtest.FileRequest) hubtest.Fault { return hubtest.Fault{Drop: true, DropAfter: 100} })
		defer s.SetFault(nil)
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != io.ErrUnexpectedEOF || len(body) != 100 {
			t.Errorf("read %d bytes, err %v; want 100 and unexpected EOF", len(body), err)
		}
	})
}
