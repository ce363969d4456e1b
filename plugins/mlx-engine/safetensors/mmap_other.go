//go:build !unix

package safetensors

import (
	"errors"
	"os"
)

func mapFile(*os.File, int) ([]byte, func() error, error) {
	return nil, nil, errors.New("mmap not supported on this platform")
}
