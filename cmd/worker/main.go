// Command worker runs a MaxQ worker: it claims ready steps and flow calls
// from PostgreSQL (MAXQ_DATABASE_URL) and runs the scripts under
// MAXQ_FLOWS_ROOT. Any number of workers may share one database. Under AWS
// Lambda (AWS_LAMBDA_RUNTIME_API set) each scheduled invocation sweeps once
// and drains work until close to its deadline; otherwise it runs until
// SIGTERM, with a reaper on a schedule.
package main

import "github.com/maxq-dev/maxq/internal/app"

func main() {
	app.Main(app.Binary{Name: "maxq-worker", Run: app.RunWorker, Lambda: app.StartWorkerLambda})
}
