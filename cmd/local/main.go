// Command local runs MaxQ for development in one process: the HTTP API, the
// worker and the reaper, on an embedded PostgreSQL kept in .maxq/ unless
// MAXQ_DATABASE_URL names a server. Flows come from MAXQ_FLOWS_ROOT
// (default examples/).
package main

import (
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/config"
)

func main() {
	app.Main(app.Binary{Name: "maxq", Run: app.RunLocal, Defaults: func(c *config.Config) {
		c.FlowsRoot = "examples"
		c.Host = "127.0.0.1"
	}})
}
