package view

import "testing"

func TestResolveKV(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		kv, path string
		same     bool
		want     string
		wantErr  bool
	}{
		"path host replaces the endpoint's host": {kv: "n2:7000", path: "10.0.0.2", want: "10.0.0.2:7000"},
		"path host:port keeps the endpoint port": {kv: "n2:7000", path: "10.0.0.2:7946", want: "10.0.0.2:7000"},
		"ipv6 path address":                      {kv: "0.0.0.0:7000", path: "fe80::1", want: "[fe80::1]:7000"},
		"bracketed ipv6 path address":            {kv: "0.0.0.0:7000", path: "[fe80::1]", want: "[fe80::1]:7000"},
		"no path keeps the endpoint":             {kv: "192.168.1.4:7000", want: "192.168.1.4:7000"},
		"same node ignores the path":             {kv: "127.0.0.1:7000", path: "10.0.0.2", same: true, want: "127.0.0.1:7000"},
		"same node unspecified is loopback":      {kv: "0.0.0.0:7000", same: true, want: "127.0.0.1:7000"},
		"same node unspecified v6 is loopback":   {kv: "[::]:7000", same: true, want: "[::1]:7000"},
		"same node empty host is loopback":       {kv: ":7000", same: true, want: "127.0.0.1:7000"},
		"unspecified without path":               {kv: "0.0.0.0:7000", wantErr: true},
		"no port":                                {kv: "n2", wantErr: true},
		"port zero":                              {kv: "n2:0", wantErr: true},
		"port too large":                         {kv: "n2:70000", wantErr: true},
		"named port":                             {kv: "n2:kv", wantErr: true},
		"empty":                                  {kv: "", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ResolveKV(tc.kv, tc.same, tc.path)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ResolveKV(%q, %v, %q) = %q, want an error", tc.kv, tc.same, tc.path, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveKV(%q, %v, %q) = %q, %v; want %q", tc.kv, tc.same, tc.path, got, err, tc.want)
			}
		})
	}
}

func TestSplitKV(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		host, port  string
		ok, unspecd bool
	}{
		"h:1":          {host: "h", port: "1", ok: true},
		"[::1]:65535":  {host: "::1", port: "65535", ok: true},
		"0.0.0.0:7000": {host: "0.0.0.0", port: "7000", ok: true, unspecd: true},
		"[::]:7000":    {host: "::", port: "7000", ok: true, unspecd: true},
		":7000":        {host: "", port: "7000", ok: true, unspecd: true},
		"h":            {},
		"h:0":          {},
		"h:-1":         {},
		"h:65536":      {},
		"":             {},
	}
	for kv, tc := range tests {
		host, port, err := splitKV(kv)
		if (err == nil) != tc.ok || host != tc.host || port != tc.port {
			t.Errorf("splitKV(%q) = %q, %q, %v", kv, host, port, err)
		}
		if tc.ok && unspecifiedHost(host) != tc.unspecd {
			t.Errorf("unspecifiedHost(%q) = %v, want %v", host, !tc.unspecd, tc.unspecd)
		}
	}
}
