package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/reaper"
	"github.com/maxq-dev/maxq/internal/store"
	"github.com/maxq-dev/maxq/internal/worker"
)

// InLambda reports whether this process is an AWS Lambda function.
func InLambda() bool { return os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" }

// LambdaDefaults are the defaults inside Lambda: flows bundled next to the
// bootstrap binary, in flows/.
func LambdaDefaults() config.Config {
	c := config.Defaults()
	c.FlowsRoot = filepath.Join(cmp.Or(os.Getenv("LAMBDA_TASK_ROOT"), "."), "flows")
	return c
}

// APIHandler is the API as a Lambda handler for API Gateway HTTP API
// (payload format 2.0) events.
type APIHandler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// NewAPIHandler opens the database (applying migrations, once per
// container) and returns the API's Lambda handler and what closes it.
func NewAPIHandler(ctx context.Context, cfg config.Config, logger *slog.Logger) (APIHandler, func(), error) {
	db, err := OpenDatabase(ctx, cfg, logger, "")
	if err != nil {
		return nil, nil, err
	}
	handler := api.New(api.Config{Store: store.New(db.Pool), Catalog: flow.Catalog{Root: cfg.FlowsRoot}, Logger: logger,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxArtifactBytes: cfg.MaxArtifactBytes, Tokens: auth.New(cfg.APIToken)})
	return httpadapter.NewV2(handler).ProxyWithContext, db.Close, nil
}

// StartAPILambda serves the API to the Lambda runtime; it does not return.
func StartAPILambda(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	h, closeDB, err := NewAPIHandler(ctx, cfg, logger)
	if err != nil {
		return err
	}
	lambda.StartWithOptions(h, lambda.WithEnableSIGTERM(closeDB))
	return nil
}

// WorkerResult is what one invocation of the worker function did.
type WorkerResult struct {
	worker.Report
	StepsReaped     int `json:"stepsReaped"`
	FlowCallsReaped int `json:"flowCallsReaped"`
	RunsSettled     int `json:"runsSettled"`
}

// WorkerFunction is the worker as a Lambda function on a schedule: each
// invocation sweeps once, then drains work until close to its deadline.
type WorkerFunction struct {
	cfg     config.Config
	store   *store.Store
	catalog flow.Catalog
	logger  *slog.Logger
	reaper  *reaper.Reaper // lives as long as the container
	binDir  string         // holds the maxq CLI for scripts
	close   func()
}

// NewWorkerFunction opens the database and returns the worker function.
// Scripts call the API at MAXQ_API_URL, which must be set.
func NewWorkerFunction(ctx context.Context, cfg config.Config, logger *slog.Logger) (*WorkerFunction, error) {
	if cfg.APIURL == "" {
		return nil, fmt.Errorf("MAXQ_API_URL is not set: scripts need the API's URL (the HTTP API's endpoint + /api/v1)")
	}
	catalog, err := OpenCatalog(cfg, logger)
	if err != nil {
		return nil, err
	}
	db, err := OpenDatabase(ctx, cfg, logger, "")
	if err != nil {
		return nil, err
	}
	st := store.New(db.Pool)
	binDir, removeBinDir := CLIBinDir(logger)
	return &WorkerFunction{cfg: cfg, store: st, catalog: catalog, logger: logger, binDir: binDir,
		reaper: reaper.New(ReaperConfig(cfg, st, logger)), close: func() { db.Close(); removeBinDir() }}, nil
}

// Close closes the database pool.
func (f *WorkerFunction) Close() { f.close() }

// Handle is one invocation. The event (an EventBridge schedule, or any
// JSON) is ignored; the context's deadline bounds the work.
func (f *WorkerFunction) Handle(ctx context.Context, _ json.RawMessage) (WorkerResult, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	var res WorkerResult
	sweep, err := f.reaper.Sweep(ctx)
	if err != nil {
		f.logger.Warn("reaper sweep failed", "err", err)
	}
	res.StepsReaped, res.FlowCallsReaped, res.RunsSettled = sweep.StepsLost, sweep.FlowCallsLost, sweep.RunsSettled
	wc := WorkerConfig(f.cfg, f.store, f.catalog, f.logger, f.cfg.APIURL)
	wc.BinDir = f.binDir
	report, err := worker.New(wc).Drain(ctx, deadline)
	res.Report = report
	f.logger.Info("invocation done", "steps_claimed", report.StepsClaimed, "flow_calls_claimed", report.FlowCallsClaimed,
		"steps_completed", report.StepsCompleted, "steps_failed", report.StepsFailed, "handed_back", report.HandedBack,
		"steps_reaped", res.StepsReaped, "flow_calls_reaped", res.FlowCallsReaped)
	return res, err
}

// StartWorkerLambda serves the worker function to the Lambda runtime; it
// does not return.
func StartWorkerLambda(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	f, err := NewWorkerFunction(ctx, cfg, logger)
	if err != nil {
		return err
	}
	lambda.StartWithOptions(f.Handle, lambda.WithEnableSIGTERM(f.Close))
	return nil
}
