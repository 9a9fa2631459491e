// Command api serves MaxQ's HTTP API against PostgreSQL (MAXQ_DATABASE_URL)
// with flows from MAXQ_FLOWS_ROOT: as an AWS Lambda function behind an API
// Gateway HTTP API when AWS_LAMBDA_RUNTIME_API is set, else as an HTTP
// server on MAXQ_HOST:MAXQ_PORT. It keeps no state: run as many as you like.
package main

import "github.com/maxq-dev/maxq/internal/app"

func main() {
	app.Main(app.Binary{Name: "maxq-api", Run: app.RunAPI, Lambda: app.StartAPILambda})
}
