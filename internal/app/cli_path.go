package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/maxq-dev/maxq/internal/cli"
)

// cliName is the name under which MaxQ's binaries act as the maxq CLI.
const cliName = "maxq"

// RunAsCLI runs the maxq command-line client and exits when this binary was
// invoked under the name maxq: that is how the worker gives every script the
// CLI, a link named maxq to its own executable first on the script's PATH.
func RunAsCLI() {
	if filepath.Base(os.Args[0]) != cliName {
		return
	}
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// CLIBinDir makes a directory holding "maxq", a link to this executable,
// for the worker to put first on its scripts' PATH. It returns "" (and logs
// why) when it cannot, and a function that removes the directory.
func CLIBinDir(logger *slog.Logger) (string, func()) {
	exe, err := os.Executable()
	if err != nil {
		logger.Warn("scripts will not have the maxq CLI on their PATH", "err", err)
		return "", func() {}
	}
	dir, err := os.MkdirTemp("", "maxq-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.Symlink(exe, filepath.Join(dir, cliName))
	}
	if err != nil {
		logger.Warn("scripts will not have the maxq CLI on their PATH", "err", err)
		return "", func() {}
	}
	return dir, func() { _ = os.RemoveAll(dir) }
}
