package testengine

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // engine sources
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Building the engines: once per process, cached on disk across processes.

//go:embed engines/uvicorn_engine.py
var uvicornSource []byte

//go:embed engines/httplib_engine.cpp
var httplibSource []byte

// Python is the interpreter of the uvicorn engine: Debian's, which has
// python3-fastapi and python3-uvicorn (not whatever python3 is on PATH).
const Python = "/usr/bin/python3"

type artifact struct {
	once sync.Once
	argv []string
	err  error
}

var artifacts = map[Kind]*artifact{Uvicorn: {}, HTTPLib: {}}

// command returns the argv (without --port) that runs an engine of kind k,
// building it first if needed.
func command(k Kind) ([]string, error) {
	a, ok := artifacts[k]
	if !ok {
		return nil, fmt.Errorf("unknown engine kind %q", k)
	}
	a.once.Do(func() {
		switch k {
		case Uvicorn:
			a.argv, a.err = prepareUvicorn()
		case HTTPLib:
			a.argv, a.err = buildHTTPLib()
		}
	})
	return a.argv, a.err
}

func prepareUvicorn() ([]string, error) {
	if _, err := os.Stat(Python); err != nil {
		return nil, fmt.Errorf("the uvicorn engine needs %s with the Debian packages python3-fastapi and python3-uvicorn (install them, e.g. with scripts/deps): %v", Python, err)
	}
	out, err := exec.Command(Python, "-c", "import fastapi, uvicorn").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("the uvicorn engine needs the Debian packages python3-fastapi and python3-uvicorn for %s (install them, e.g. with scripts/deps): %v\n%s", Python, err, out)
	}
	dir, err := cacheDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "uvicorn_engine-"+hash(uvicornSource)+".py")
	if err := writeOnce(path, 0o644, func(tmp string) error { return os.WriteFile(tmp, uvicornSource, 0o644) }); err != nil {
		return nil, err
	}
	return []string{Python, path}, nil
}

func buildHTTPLib() ([]string, error) {
	if _, err := exec.LookPath("g++"); err != nil {
		return nil, fmt.Errorf("the httplib engine needs the Debian packages g++, libcpp-httplib-dev and pkg-config (install them, e.g. with scripts/deps): %v", err)
	}
	// The flags must match those Debian built libcpp-httplib with (they
	// change the layout of its types): ask pkg-config, else assume Debian's.
	flags := "-DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT -lcpp-httplib"
	if out, err := exec.Command("pkg-config", "--cflags", "--libs", "cpp-httplib").Output(); err == nil {
		flags = strings.TrimSpace(string(out))
	} else if _, err := os.Stat("/usr/include/httplib.h"); err != nil {
		return nil, fmt.Errorf("the httplib engine needs the Debian package libcpp-httplib-dev (install it, e.g. with scripts/deps): no cpp-httplib.pc and %v", err)
	}
	args := append([]string{"-std=c++17", "-O1", "-x", "c++", "-", "-x", "none"}, strings.Fields(flags)...)
	args = append(args, "-lpthread")
	dir, err := cacheDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "httplib_engine-"+hash(httplibSource, []byte(strings.Join(args, " "))))
	err = writeOnce(path, 0o755, func(tmp string) error {
		cmd := exec.Command("g++", append(args, "-o", tmp)...)
		cmd.Stdin = bytes.NewReader(httplibSource)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("compiling the httplib engine failed (g++ %s): %v\n%s\nIt needs the Debian packages g++, libcpp-httplib-dev and pkg-config (install them, e.g. with scripts/deps)", strings.Join(args, " "), err, out)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return []string{path}, nil
}

func hash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// cacheDir returns os.UserCacheDir()/kneecap-testengine, else a directory in
// os.TempDir().
func cacheDir() (string, error) {
	if base, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(base, "kneecap-testengine")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			return dir, nil
		}
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("kneecap-testengine-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testengine cache directory: %w", err)
	}
	return dir, nil
}

// writeOnce makes the file at path, unless it exists, by calling build on a
// temporary name in the same directory and renaming it into place. A file
// lock keeps concurrent test binaries from doing the work twice; the rename
// keeps a reader from ever seeing a partial file.
func writeOnce(path string, mode os.FileMode, build func(tmp string) error) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = lock.Close() }() // releases the lock
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the lock on %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := os.Stat(path); err == nil {
		return nil // made by another process meanwhile
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_ = f.Close()
	defer func() { _ = os.Remove(tmp) }() // fails harmlessly after the rename
	if err := build(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
