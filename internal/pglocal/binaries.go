package pglocal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries are installed.
var ErrNoBinaries = errors.New(`PostgreSQL server binaries not found (initdb, postgres): ` +
	`install them, e.g. "apt-get install postgresql" or "brew install postgresql@16", or set MAXQ_DATABASE_URL`)

// FindBinaries returns the directory holding initdb and postgres: the one
// initdb is found in on PATH, else the highest version in
// /usr/lib/postgresql/*/bin (Debian and Ubuntu keep them off PATH).
func FindBinaries() (string, error) {
	if path, err := exec.LookPath("initdb"); err == nil {
		// Resolve symlinks such as /usr/local/bin/initdb: initdb looks for
		// postgres beside its real location, and so do we.
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		if dir := filepath.Dir(path); hasBinaries(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestVersion := "", -1.0
	for _, dir := range dirs {
		version, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err == nil && version > bestVersion && hasBinaries(dir) {
			best, bestVersion = dir, version
		}
	}
	if best == "" {
		return "", ErrNoBinaries
	}
	return best, nil
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}
