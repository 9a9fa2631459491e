package app_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testToken is the API token of the tests that turn authentication on.
const testToken = "lambda-test-token-0123456789"

// writeScript writes an executable script under root.
func writeScript(t *testing.T, root, rel, body string) {
	t.Helper()
	path := filepath.Join(root, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o755))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// --- the API function

// apiGateway sends requests to a Lambda API handler the way API Gateway
// HTTP APIs do (payload format 2.0, $default stage).
type apiGateway struct {
	t       *testing.T
	handler app.APIHandler
}

// gatewayResponse is a handler's answer with its body decoded.
type gatewayResponse struct {
	events.APIGatewayV2HTTPResponse
	JSON map[string]any
}

// request builds the event API Gateway sends for method and path (with an
// optional raw query string) and a JSON body.
func request(method, path, query, body string, headers map[string]string) events.APIGatewayV2HTTPRequest {
	h := map[string]string{"content-type": "application/json", "accept": "*/*", "user-agent": "curl/8.5.0"}
	for k, v := range headers {
		h[k] = v
	}
	routeKey := "ANY /{proxy+}"
	if path == "/" {
		routeKey = "ANY /"
	}
	return events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       routeKey,
		RawPath:        path,
		RawQueryString: query,
		Headers:        h,
		Body:           body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			AccountID:  "123456789012",
			APIID:      "a1b2c3d4e5",
			DomainName: "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com",
			Stage:      "$default",
			RequestID:  "req-1",
			RouteKey:   routeKey,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "203.0.113.7", UserAgent: "curl/8.5.0",
			},
		},
	}
}

func (g *apiGateway) send(req events.APIGatewayV2HTTPRequest) gatewayResponse {
	g.t.Helper()
	res, err := g.handler(context.Background(), req)
	require.NoError(g.t, err)
	out := gatewayResponse{APIGatewayV2HTTPResponse: res}
	require.False(g.t, res.IsBase64Encoded, "a JSON body is sent as text")
	require.Equal(g.t, "application/json", res.Headers["Content-Type"], "%s %s: headers %v", req.RequestContext.HTTP.Method, req.RawPath, res.Headers)
	require.NoError(g.t, json.Unmarshal([]byte(res.Body), &out.JSON), "body: %s", res.Body)
	return out
}

func (g *apiGateway) do(method, path, query, body string) gatewayResponse {
	g.t.Helper()
	return g.send(request(method, path, query, body, nil))
}

// requireError checks an error answer: status, code, and the error body's shape.
func requireError(t *testing.T, res gatewayResponse, status int, code string) {
	t.Helper()
	require.Equal(t, status, res.StatusCode, "body: %s", res.Body)
	require.Equal(t, code, res.JSON["code"], "body: %s", res.Body)
	require.NotEmpty(t, res.JSON["error"])
	require.IsType(t, map[string]any{}, res.JSON["details"])
}

// demoFlows is a FLOWS_ROOT with flow demo and its steps a and b.
func demoFlows(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeScript(t, root, "demo/flow.sh", "#!/bin/sh\nexit 0\n")
	writeScript(t, root, "demo/steps/a/step.sh", "#!/bin/sh\necho a\n")
	writeScript(t, root, "demo/steps/b/step.sh", "#!/bin/sh\necho b\n")
	return root
}

// newAPIGateway builds the API function's handler as cmd/api does in Lambda.
func newAPIGateway(t *testing.T, databaseURL, root, token string) *apiGateway {
	t.Helper()
	cfg := config.Defaults()
	cfg.DatabaseURL = databaseURL
	cfg.FlowsRoot = root
	cfg.APIToken = token
	h, closeDB, err := app.NewAPIHandler(context.Background(), cfg, discardLogger())
	require.NoError(t, err)
	t.Cleanup(closeDB)
	return &apiGateway{t: t, handler: h}
}

func TestAPIHandler(t *testing.T) {
	t.Parallel()
	root := demoFlows(t)
	databaseURL := pgtest.DatabaseURL(t)
	gw := newAPIGateway(t, databaseURL, root, "")
	const prefix = api.Prefix

	// Trigger a run.
	res := gw.do("POST", prefix+"/flows/demo/runs", "", `{"input":{"n":1},"metadata":{"by":"lambda"}}`)
	require.Equal(t, 201, res.StatusCode, "body: %s", res.Body)
	runID, _ := res.JSON["id"].(string)
	require.Len(t, runID, 36)
	require.Equal(t, "demo", res.JSON["flowName"])
	require.Equal(t, "pending", res.JSON["status"])
	require.Equal(t, map[string]any{"n": 1.0}, res.JSON["input"])

	// Schedule a stage of it.
	res = gw.do("POST", prefix+"/runs/"+runID+"/steps", "",
		`{"stage":"first","final":false,"steps":[{"name":"a","instances":1,"maxRetries":0},{"name":"b","dependsOn":["a"],"instances":1,"maxRetries":0}]}`)
	require.Equal(t, 201, res.StatusCode, "body: %s", res.Body)
	require.Equal(t, "first", res.JSON["stage"])
	require.EqualValues(t, 2, res.JSON["scheduled"])
	steps, _ := res.JSON["steps"].([]any)
	require.Len(t, steps, 2)
	stepA, _ := steps[0].(map[string]any)
	require.Equal(t, "a", stepA["name"])
	stepAID, _ := stepA["id"].(string)
	require.NotEmpty(t, stepAID)

	// Store an artifact of step a, and query it back by step name.
	res = gw.do("POST", prefix+"/runs/"+runID+"/artifacts", "",
		`{"stepId":"`+stepAID+`","stepName":"a","sequence":0,"name":"greeting","value":{"message":"hello"},"tags":["demo"]}`)
	require.Equal(t, 201, res.StatusCode, "body: %s", res.Body)
	require.Equal(t, "greeting", res.JSON["name"])
	artifactID, _ := res.JSON["id"].(string)
	require.NotEmpty(t, artifactID)

	res = gw.do("GET", prefix+"/runs/"+runID+"/artifacts", "stepName=a", "")
	require.Equal(t, 200, res.StatusCode, "body: %s", res.Body)
	artifacts, _ := res.JSON["artifacts"].([]any)
	require.Len(t, artifacts, 1)
	got, _ := artifacts[0].(map[string]any)
	require.Equal(t, artifactID, got["id"])
	require.Equal(t, "a", got["stepName"])
	require.Equal(t, map[string]any{"message": "hello"}, got["value"])
	require.Equal(t, []any{"demo"}, got["tags"])
	require.Equal(t, map[string]any{"total": 1.0, "limit": 100.0, "offset": 0.0}, res.JSON["pagination"])

	// The query string reaches the handler: another step has none.
	res = gw.do("GET", prefix+"/runs/"+runID+"/artifacts", "stepName=b", "")
	require.Equal(t, 200, res.StatusCode, "body: %s", res.Body)
	require.Empty(t, res.JSON["artifacts"])

	t.Run("Base64Body", func(t *testing.T) {
		t.Parallel()
		req := request("POST", prefix+"/flows/demo/runs", "", base64.StdEncoding.EncodeToString([]byte(`{"input":"b64"}`)), nil)
		req.IsBase64Encoded = true
		res := gw.send(req)
		require.Equal(t, 201, res.StatusCode, "body: %s", res.Body)
		require.Equal(t, "b64", res.JSON["input"])
	})
	t.Run("ValidationError", func(t *testing.T) {
		t.Parallel()
		res := gw.do("POST", prefix+"/runs/"+runID+"/steps", "", `{"stage":"no spaces allowed","steps":[]}`)
		requireError(t, res, 400, "VALIDATION_ERROR")
		details, _ := res.JSON["details"].(map[string]any)
		require.Contains(t, details, "stage")
		require.Contains(t, details, "final")
		require.Contains(t, details, "steps")
	})
	t.Run("MalformedJSON", func(t *testing.T) {
		t.Parallel()
		requireError(t, gw.do("POST", prefix+"/flows/demo/runs", "", `{"input":`), 400, "VALIDATION_ERROR")
	})
	t.Run("UnknownRun", func(t *testing.T) {
		t.Parallel()
		requireError(t, gw.do("GET", prefix+"/runs/00000000-0000-4000-8000-000000000000", "", ""), 404, "NOT_FOUND")
	})
	t.Run("UnknownFlow", func(t *testing.T) {
		t.Parallel()
		requireError(t, gw.do("POST", prefix+"/flows/nope/runs", "", "{}"), 404, "NOT_FOUND")
	})
	t.Run("UnknownRoute", func(t *testing.T) {
		t.Parallel()
		requireError(t, gw.do("GET", prefix+"/nope", "", ""), 404, "NOT_FOUND")
		// The template routes / to the function too.
		requireError(t, gw.do("GET", "/", "", ""), 404, "NOT_FOUND")
	})
	t.Run("WrongMethod", func(t *testing.T) {
		t.Parallel()
		res := gw.do("DELETE", prefix+"/runs/"+runID, "", "")
		requireError(t, res, 405, "METHOD_NOT_ALLOWED")
		require.Equal(t, "GET", res.Headers["Allow"])
	})
	t.Run("Token", func(t *testing.T) {
		t.Parallel()
		// A second function on the same database, with MAXQ_API_TOKEN set.
		gw := newAPIGateway(t, databaseURL, root, testToken)
		res := gw.do("GET", prefix+"/flows", "", "")
		requireError(t, res, 401, "UNAUTHORIZED")
		require.Equal(t, `Bearer realm="maxq"`, res.Headers["Www-Authenticate"])

		// API Gateway hands headers over lower-cased.
		res = gw.send(request("GET", prefix+"/runs/"+runID, "", "", map[string]string{"authorization": "Bearer " + testToken}))
		require.Equal(t, 200, res.StatusCode, "body: %s", res.Body)
		require.Equal(t, runID, res.JSON["id"])
		stages, _ := res.JSON["stages"].([]any)
		require.Len(t, stages, 1)
	})
}

// --- the worker function

// scheduledEvent is what an EventBridge schedule sends the worker.
const scheduledEvent = `{
  "version": "0",
  "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
  "detail-type": "Scheduled Event",
  "source": "aws.events",
  "account": "123456789012",
  "time": "2025-11-22T03:00:00Z",
  "region": "eu-west-1",
  "resources": ["arn:aws:events:eu-west-1:123456789012:rule/maxq-WorkerFunctionSchedule"],
  "detail": {}
}`

// workerBundle is a worker function, the API server its scripts call, and
// the store they share, on a database of their own.
type workerBundle struct {
	t      *testing.T
	store  *store.Store
	fn     *app.WorkerFunction
	handle lambda.Handler
}

// newWorkerBundle starts an API server on a loopback port and builds the
// worker function as cmd/worker does in Lambda, with flows from root.
func newWorkerBundle(t *testing.T, root string) *workerBundle {
	t.Helper()
	ctx := context.Background()
	databaseURL := pgtest.DatabaseURL(t)
	pool, err := app.Connect(ctx, databaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st := store.New(pool)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srvCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- app.Serve(srvCtx, ln, api.New(api.Config{Store: st, Catalog: flow.Catalog{Root: root}, Tokens: auth.New(testToken)}), time.Second)
	}()
	t.Cleanup(func() { stop(); require.NoError(t, <-served) })

	cfg := config.Defaults()
	cfg.DatabaseURL = databaseURL
	cfg.FlowsRoot = root
	cfg.APIURL = app.LocalAPIURL(ln.Addr())
	cfg.APIToken = testToken
	cfg.Listen = false // as behind RDS Proxy: poll only
	cfg.PollInterval = 100 * time.Millisecond
	cfg.FlowTimeout = 5 * time.Second
	cfg.LeaseTTL = 2 * time.Second
	f, err := app.NewWorkerFunction(ctx, cfg, discardLogger())
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return &workerBundle{t: t, store: st, fn: f, handle: lambda.NewHandler(f.Handle)}
}

// invocation is the JSON result of one invocation.
type invocation map[string]int

// invoke runs one invocation as the Lambda runtime does: the payload is the
// scheduled event, the context ends at the function's deadline, and the
// result is encoded as JSON.
func (b *workerBundle) invoke(timeout time.Duration) invocation {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := b.handle.Invoke(ctx, []byte(scheduledEvent))
	require.NoError(b.t, err)
	var res invocation
	require.NoError(b.t, json.Unmarshal(out, &res), "result: %s", out)
	keys := []string{"stepsClaimed", "flowCallsClaimed", "stepsCompleted", "stepsFailed", "flowCallsFailed",
		"handedBack", "stepsReaped", "flowCallsReaped", "runsSettled"}
	require.Subset(b.t, mapKeys(res), keys, "result: %s", out)
	// Every step it claimed ended within the invocation, one way or another.
	require.Equal(b.t, res["stepsClaimed"], res["stepsCompleted"]+res["stepsFailed"]+res["handedBack"], "result: %s", out)
	return res
}

func (b *workerBundle) trigger(flowName string) string {
	b.t.Helper()
	run, created, err := b.store.RunCreate(context.Background(), store.RunCreateParams{FlowName: flowName})
	require.NoError(b.t, err)
	require.True(b.t, created)
	return run.ID
}

func (b *workerBundle) run(id string) core.Run {
	b.t.Helper()
	run, _, err := b.store.RunGet(context.Background(), id)
	require.NoError(b.t, err)
	return run
}

func (b *workerBundle) steps(runID string) map[string]core.Step {
	b.t.Helper()
	steps, _, err := b.store.StepList(context.Background(), store.StepListParams{RunID: runID, Page: store.Page{Limit: 100}})
	require.NoError(b.t, err)
	out := map[string]core.Step{}
	for _, s := range steps {
		out[s.Name] = s
	}
	return out
}

func mapKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// twoStageFlow is flow.sh of a flow with stages first (step a) and second
// (step b, whose MAXQ_STEP_TIMEOUT is 8 s), scheduled with curl like a
// script in Lambda would.
const twoStageFlow = `#!/bin/sh
set -eu
if [ -n "${MAXQ_FAILED_STAGE:-}" ]; then echo "stage $MAXQ_FAILED_STAGE failed" >&2; exit 1; fi
case "${MAXQ_COMPLETED_STAGE:-}" in
  "") body='{"stage":"first","final":false,"steps":[{"name":"a","instances":1,"maxRetries":0}]}' ;;
  first) body='{"stage":"second","final":true,"steps":[{"name":"b","instances":1,"maxRetries":0,"env":{"MAXQ_STEP_TIMEOUT":"8"}}]}' ;;
  *) exit 0 ;;
esac
curl -fsS -X POST -H 'Content-Type: application/json' -H "Authorization: Bearer $MAXQ_TOKEN" \
  --data "$body" "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" >/dev/null
`

// stepA stores an artifact through the API, with its run token.
const stepA = `#!/bin/sh
set -eu
curl -fsS -X POST -H 'Content-Type: application/json' -H "Authorization: Bearer $MAXQ_TOKEN" \
  --data '{"stepId":"'"$MAXQ_STEP_ID"'","stepName":"a","sequence":0,"name":"note","value":{"from":"a"}}' \
  "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts" >/dev/null
`

// stepB reads it back in a later invocation.
const stepB = `#!/bin/sh
set -eu
curl -fsS -H "Authorization: Bearer $MAXQ_TOKEN" "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts?stepName=a&name=note" | grep -q '"from":"a"'
`

func TestWorkerFunction(t *testing.T) {
	t.Parallel()

	t.Run("RunCompletesAcrossInvocations", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		writeScript(t, root, "demo/flow.sh", twoStageFlow)
		writeScript(t, root, "demo/steps/a/step.sh", stepA)
		writeScript(t, root, "demo/steps/b/step.sh", stepB)
		b := newWorkerBundle(t, root)
		id := b.trigger("demo")

		// The first invocation has 10 s: less than the 3 s margin plus b's
		// 8 s, so it runs the first stage and leaves b.
		first := b.invoke(10 * time.Second)
		require.Equal(t, 1, first["stepsClaimed"], "first invocation: %v", first)
		require.GreaterOrEqual(t, first["flowCallsClaimed"], 1, "first invocation: %v", first)
		require.Equal(t, core.RunRunning, b.run(id).Status)
		require.Equal(t, core.StepCompleted, b.steps(id)["a"].Status)

		total := first
		invocations := 1
		for b.run(id).Status == core.RunRunning {
			require.Less(t, invocations, 6, "run %s still running after %d invocations: %v", id, invocations, total)
			res := b.invoke(20 * time.Second)
			invocations++
			for k, v := range res {
				total[k] += v
			}
		}
		require.Equal(t, core.RunCompleted, b.run(id).Status)
		require.GreaterOrEqual(t, invocations, 2)
		require.Equal(t, invocation{
			"stepsClaimed": 2, "flowCallsClaimed": 2, "stepsCompleted": 2, "stepsFailed": 0, "flowCallsFailed": 0,
			"handedBack": 0, "stepsReaped": 0, "flowCallsReaped": 0, "runsSettled": 0,
		}, total)
		for name, s := range b.steps(id) {
			require.Equal(t, core.StepCompleted, s.Status, "step %s (error %s)", name, s.Error)
			require.Equal(t, 1, s.Attempt, "step %s", name)
		}
		artifacts, _, err := b.store.ArtifactList(context.Background(), store.ArtifactListParams{RunID: id, Page: store.Page{Limit: 10}})
		require.NoError(t, err)
		require.Len(t, artifacts, 1)
		require.JSONEq(t, `{"from":"a"}`, string(artifacts[0].Value))

		// Nothing is left: an idle invocation claims nothing and returns
		// long before its deadline.
		start := time.Now()
		idle := b.invoke(20 * time.Second)
		require.Less(t, time.Since(start), 10*time.Second)
		require.Zero(t, idle["stepsClaimed"]+idle["flowCallsClaimed"], "idle invocation: %v", idle)
	})

	t.Run("LongStepLeftPending", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		writeScript(t, root, "mixed/flow.sh", `#!/bin/sh
set -eu
[ -z "${MAXQ_COMPLETED_STAGE:-}${MAXQ_FAILED_STAGE:-}" ] || exit 0
curl -fsS -X POST -H "Authorization: Bearer $MAXQ_TOKEN" "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" --data '{"stage":"only","final":true,"steps":[
  {"name":"short","instances":1,"maxRetries":0,"env":{"MAXQ_STEP_TIMEOUT":"5"}},
  {"name":"long","instances":1,"maxRetries":0,"env":{"MAXQ_STEP_TIMEOUT":"600"}}]}' >/dev/null
`)
		writeScript(t, root, "mixed/steps/short/step.sh", "#!/bin/sh\necho short\n")
		writeScript(t, root, "mixed/steps/long/step.sh", "#!/bin/sh\necho long\n")
		b := newWorkerBundle(t, root)
		id := b.trigger("mixed")

		res := b.invoke(20 * time.Second)
		require.Equal(t, 1, res["flowCallsClaimed"], "result: %v", res)
		require.Equal(t, 1, res["stepsClaimed"], "result: %v", res)
		require.Equal(t, 1, res["stepsCompleted"], "result: %v", res)
		steps := b.steps(id)
		require.Equal(t, core.StepCompleted, steps["short"].Status)
		long := steps["long"]
		require.Equal(t, core.StepPending, long.Status)
		require.Zero(t, long.Attempt)
		require.Nil(t, long.StartedAt)

		// No invocation can fit 600 s: the next claims nothing either, and
		// the run waits for a worker outside Lambda.
		res = b.invoke(20 * time.Second)
		require.Zero(t, res["stepsClaimed"], "result: %v", res)
		require.Equal(t, core.StepPending, b.steps(id)["long"].Status)
		require.Equal(t, core.RunRunning, b.run(id).Status)
	})

	// When a dependency's result is recorded, the same transaction claims
	// its dependents — but a draining worker only those whose timeout fits
	// before its deadline, as its claim loop would.
	t.Run("DependentsClaimedWithResultOnlyIfTheyFit", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		writeScript(t, root, "fan/flow.sh", `#!/bin/sh
set -eu
[ -z "${MAXQ_COMPLETED_STAGE:-}${MAXQ_FAILED_STAGE:-}" ] || exit 0
curl -fsS -X POST -H "Authorization: Bearer $MAXQ_TOKEN" "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" --data '{"stage":"only","final":true,"steps":[
  {"name":"a","instances":1,"maxRetries":0,"env":{"MAXQ_STEP_TIMEOUT":"5"}},
  {"name":"b","instances":1,"maxRetries":0,"dependsOn":["a"],"env":{"MAXQ_STEP_TIMEOUT":"5"}},
  {"name":"long","instances":1,"maxRetries":0,"dependsOn":["a"],"env":{"MAXQ_STEP_TIMEOUT":"600"}}]}' >/dev/null
`)
		for _, name := range []string{"a", "b", "long"} {
			writeScript(t, root, "fan/steps/"+name+"/step.sh", "#!/bin/sh\nexit 0\n")
		}
		b := newWorkerBundle(t, root)
		id := b.trigger("fan")

		res := b.invoke(20 * time.Second)
		require.Equal(t, 2, res["stepsClaimed"], "result: %v", res)
		require.Equal(t, 2, res["stepsCompleted"], "result: %v", res)
		steps := b.steps(id)
		a, dep := steps["a"], steps["b"]
		require.Equal(t, core.StepCompleted, a.Status)
		require.Equal(t, core.StepCompleted, dep.Status)
		require.NotNil(t, a.CompletedAt)
		require.NotNil(t, dep.StartedAt)
		require.Equal(t, *a.CompletedAt, *dep.StartedAt, "b claimed as a's result was recorded")
		long := steps["long"]
		require.Equal(t, core.StepPending, long.Status, "600 s cannot fit in the invocation")
		require.Zero(t, long.Attempt)
		require.Equal(t, core.RunRunning, b.run(id).Status)
	})

	t.Run("ReaperWarmsUpAcrossInvocations", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		writeScript(t, root, "idle/flow.sh", "#!/bin/sh\nexit 0\n")
		b := newWorkerBundle(t, root)
		b.trigger("idle")

		// A worker claimed the run's flow call and died without a word.
		ctx := context.Background()
		dead, err := b.store.WorkerRegister(ctx, "gone")
		require.NoError(t, err)
		calls, err := b.store.FlowCallClaim(ctx, dead, 1)
		require.NoError(t, err)
		require.Len(t, calls, 1)

		// A new container's first sweep only checks the connection.
		res := b.invoke(20 * time.Second)
		require.Zero(t, res["flowCallsReaped"], "result: %v", res)
		require.Zero(t, res["flowCallsClaimed"], "result: %v", res)

		// Once the container has been connected for a lease TTL (2 s), the
		// next invocation recovers the call and runs it.
		time.Sleep(2100 * time.Millisecond)
		res = b.invoke(20 * time.Second)
		require.Equal(t, 1, res["flowCallsReaped"], "result: %v", res)
		require.Equal(t, 1, res["flowCallsClaimed"], "result: %v", res)
	})
}
