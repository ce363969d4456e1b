package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// certReloader serves the API's certificate and reads the files again when they change, so a renewed
// certificate (certbot, a cluster's CA) takes effect without a restart.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
	checked time.Time
}

func newTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

func (r *certReloader) load() (*tls.Certificate, error) {
	st, err := os.Stat(r.certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	r.mu.Lock()
	r.cert, r.modTime = &cert, st.ModTime()
	r.mu.Unlock()
	return &cert, nil
}

// get is tls.Config.GetCertificate: the current certificate, reloaded at most every few seconds when the
// file's modification time moved. A file that fails to load keeps the certificate that worked.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	cert, changed := r.cert, false
	if time.Since(r.checked) > 5*time.Second {
		r.checked = time.Now()
		if st, err := os.Stat(r.certFile); err == nil && !st.ModTime().Equal(r.modTime) {
			changed = true
		}
	}
	r.mu.Unlock()
	if changed {
		if c, err := r.load(); err == nil {
			cert = c
		}
	}
	return cert, nil
}
