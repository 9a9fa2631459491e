// Command maxq-bench measures MaxQ on this machine: it starts a private
// PostgreSQL (fsync and synchronous_commit on), the API and workers, runs
// the scenarios of package bench and prints one table — each figure beside
// the floor measured in the same run — with the machine line.
//
//	go run ./cmd/maxq-bench                      # the full suite, under 10 minutes
//	go run ./cmd/maxq-bench --quick              # every scenario at a tiny size
//	go run ./cmd/maxq-bench --scenario burn-down --cpuprofile prof/
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/bench"
)

func main() {
	app.RunAsCLI() // a worker's scripts get this binary as maxq
	if bench.IsWorker() {
		os.Exit(bench.WorkerMain())
	}
	var opts bench.Options
	var scenarios, workerBin string
	flag.BoolVar(&opts.Quick, "quick", false, "run every scenario at a tiny size, in seconds (for CI)")
	flag.BoolVar(&opts.Quick, "smoke", false, "the same as --quick")
	flag.StringVar(&scenarios, "scenario", "", "run only these scenarios (comma-separated)")
	flag.StringVar(&opts.DatabaseURL, "database-url", "", "use this database, which is emptied, instead of a private PostgreSQL")
	flag.StringVar(&workerBin, "worker-bin", "", "run workers from this binary (say, a built cmd/worker) instead of this one")
	flag.StringVar(&opts.ProfileDir, "cpuprofile", "", "write CPU profiles of the API and of every worker, and PostgreSQL's busiest statements, to this directory")
	flag.BoolVar(&opts.Keep, "keep", false, "keep the working directory (data, flows, worker logs)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: maxq-bench [flags]\n\nscenarios:\n")
		for _, sc := range bench.Scenarios() {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-10s %s\n", sc[0], sc[1])
		}
		fmt.Fprintf(flag.CommandLine.Output(), "\nflags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if scenarios != "" {
		opts.Scenarios = strings.Split(scenarios, ",")
	}
	switch {
	case workerBin != "" && opts.ProfileDir != "":
		// Only this binary knows how to profile the workers it runs.
		fmt.Fprintln(os.Stderr, "maxq-bench: --cpuprofile runs the workers from maxq-bench itself, to profile them; --worker-bin is ignored")
	case workerBin != "":
		opts.WorkerCommand = []string{workerBin}
	}
	opts.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := bench.Run(ctx, opts)
	if report != nil {
		report.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "maxq-bench:", err)
		os.Exit(1)
	}
}
