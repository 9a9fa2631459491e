package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
	"github.com/maxq-dev/maxq/internal/worker"
)

// The examples under examples/ run offline from their fixtures, so what they
// produce is known exactly; these tests run each to the end and check it.

// TestExamplesCatalog checks that every example is usable: its scripts are
// executable bash with strict mode and parse, and the API lists every
// example flow with all its steps and no problem (examples/lib is not a flow).

// exampleRunBound is how long a run of an example may take. Alone, a run
// takes about 3 s; in a loaded full test run (two packages at once, each
// running its tests in parallel on two cores) each of its scripts, which
// start bash, curl and jq many times, can take tens of seconds. The bound
// is there to catch a run that never ends, not to measure speed.
const exampleRunBound = 3 * time.Minute

func TestExamplesCatalog(t *testing.T) {
	t.Parallel()
	root := examplesRoot(t)

	flowScripts, err := filepath.Glob(filepath.Join(root, "*", "flow.sh"))
	require.NoError(t, err)
	want := map[string][]string{} // flow → its step directories
	for _, script := range flowScripts {
		dir := filepath.Dir(script)
		entries, err := os.ReadDir(filepath.Join(dir, "steps"))
		require.NoError(t, err)
		steps := []string{}
		for _, e := range entries {
			require.True(t, e.IsDir(), "%s/steps holds only step directories, not %s", dir, e.Name())
			steps = append(steps, e.Name())
		}
		want[filepath.Base(dir)] = steps
	}
	for _, name := range []string{"hello_world", "web_scraper", "market_analysis"} {
		require.Contains(t, want, name)
	}

	t.Run("Scripts", func(t *testing.T) {
		t.Parallel()
		scripts := slices.Clone(flowScripts)
		for name, steps := range want {
			for _, step := range steps {
				scripts = append(scripts, filepath.Join(root, name, "steps", step, "step.sh"))
			}
		}
		for _, script := range scripts {
			rel, err := filepath.Rel(root, script)
			require.NoError(t, err)
			fi, err := os.Stat(script)
			require.NoError(t, err, rel)
			require.Equal(t, fs.FileMode(0o111), fi.Mode().Perm()&0o111, "%s must be executable by everyone (chmod +x)", rel)
			body, err := os.ReadFile(script)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(string(body), "#!/bin/bash\n"), "%s starts with #!/bin/bash", rel)
			require.Contains(t, string(body), "\nset -euo pipefail\n", rel)
			out, err := exec.CommandContext(t.Context(), "bash", "-n", script).CombinedOutput()
			require.NoError(t, err, "bash -n %s: %s", rel, out)
		}
		out, err := exec.CommandContext(t.Context(), "bash", "-n", filepath.Join(root, "lib", "maxq.sh")).CombinedOutput()
		require.NoError(t, err, "bash -n lib/maxq.sh: %s", out)
	})

	t.Run("Listed", func(t *testing.T) {
		t.Parallel()
		// GET /flows needs the API alone, no worker.
		srv := httptest.NewServer(api.New(api.Config{Store: store.New(pgtest.Pool(t)), Catalog: flow.Catalog{Root: root}}))
		t.Cleanup(srv.Close)
		s := &stack{t: t, root: root, API: srv.URL + api.Prefix}
		var out struct {
			Flows []struct {
				Name  string   `json:"name"`
				Path  string   `json:"path"`
				Steps []string `json:"steps"`
			} `json:"flows"`
			Problems []json.RawMessage `json:"problems"`
		}
		require.Equal(t, 200, s.call("GET", "/flows", nil, &out))
		require.Empty(t, out.Problems)
		got := map[string][]string{}
		for _, f := range out.Flows {
			require.Equal(t, filepath.Join(root, f.Name), f.Path)
			got[f.Name] = f.Steps
		}
		require.Equal(t, want, got)
	})
}

func TestWebScraper(t *testing.T) {
	t.Parallel()
	s := newStack(t, examplesRoot(t), options{})
	id := s.trigger("web_scraper", nil)
	run := s.wait(id, exampleRunBound)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	requireStages(t, run, "fetch", "scrape", "aggregate")

	steps := requireSteps(t, s, id, map[string]stepWant{
		"fetch_urls":  {Stage: "fetch", Instances: 1},
		"scrape_page": {Stage: "scrape", Instances: 10},
		"aggregate":   {Stage: "aggregate", Instances: 1},
	})

	// The fixtures: fixtures/sitemap.xml lists these pages, in this order.
	pages := []struct {
		URL   string
		Title string
		Words int
	}{
		{"https://example.com/about", "About Example Corp", 23},
		{"https://example.com/pricing", "Pricing & Plans", 20},
		{"https://example.com/blog/getting-started", "Getting Started with MaxQ", 34},
		{"https://example.com/docs/install", "Installation", 13},
		{"https://example.com/docs/configuration", "Configuration Reference", 25},
		{"https://example.com/blog/release-notes", "Release Notes: Version 1.0", 20},
		{"https://example.com/contact", "Contact Us", 13},
		{"https://example.com/careers", "Careers at Example Corp", 16},
		{"https://example.com/security", "Security", 12},
		{"https://example.com/faq", "Frequently Asked Questions", 23},
	}
	var urls, titles []string
	totalWords := 0
	for _, p := range pages {
		urls = append(urls, p.URL)
		titles = append(titles, p.Title)
		totalWords += p.Words
	}

	arts := artifactsByPath(t, s, id)
	require.Len(t, arts, 1+len(pages)+1, "paths: %v", mapKeys(arts))
	requireJSON(t, urls, arts["fetch_urls[0]/urls"].Value)

	// Each instance scraped the URL of its own sequence.
	for i, p := range pages {
		a, ok := arts[fmt.Sprintf("scrape_page[%d]/page_content", i)]
		require.True(t, ok, "scrape_page[%d] stored page_content", i)
		require.Equal(t, steps["scrape_page"][i].ID, a.StepID)
		require.Equal(t, []string{"scraped"}, a.Tags)
		requireJSON(t, map[string]any{"url": p.URL, "title": p.Title, "words": p.Words}, a.Value)
	}

	summary := map[string]any{"totalPages": len(pages), "totalWords": totalWords, "titles": titles}
	require.Equal(t, 199, totalWords)
	requireJSON(t, summary, arts["aggregate[0]/summary"].Value)
	requireJSON(t, summary, steps["aggregate"][0].Output)
}

func TestMarketAnalysis(t *testing.T) {
	t.Parallel()
	s := newStack(t, examplesRoot(t), options{})
	id := s.trigger("market_analysis", nil)
	run := s.wait(id, exampleRunBound)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	requireStages(t, run, "data-fetch", "analysis", "reporting")

	steps := requireSteps(t, s, id, map[string]stepWant{
		"fetch_news":        {Stage: "data-fetch", Instances: 1},
		"fetch_prices":      {Stage: "data-fetch", Instances: 1},
		"analyze_sentiment": {Stage: "analysis", Instances: 4},
		"calculate_trends":  {Stage: "analysis", Instances: 1},
		"generate_report":   {Stage: "reporting", Instances: 1},
	})
	require.Equal(t, map[string]string{"SOURCE": "reuters"}, steps["fetch_news"][0].Env)
	require.Equal(t, map[string]string{"SYMBOL": "AAPL"}, steps["fetch_prices"][0].Env)
	require.Equal(t, map[string]string{"MODEL": "sentiment-v2"}, steps["analyze_sentiment"][3].Env)

	// The DAG held: no step started before what it depends on completed.
	requireAfter(t, steps["analyze_sentiment"], steps["fetch_news"])
	requireAfter(t, steps["calculate_trends"], steps["fetch_prices"])
	requireAfter(t, steps["generate_report"], steps["analyze_sentiment"])
	requireAfter(t, steps["generate_report"], steps["calculate_trends"])

	arts := artifactsByPath(t, s, id)
	require.Len(t, arts, 1+1+4+1+1, "paths: %v", mapKeys(arts))

	var articles []struct{ ID string }
	require.NoError(t, json.Unmarshal(arts["fetch_news[0]/articles"].Value, &articles))
	require.Len(t, articles, 12)
	require.Equal(t, "r-001", articles[0].ID)
	require.Equal(t, []string{"news", "reuters"}, arts["fetch_news[0]/articles"].Tags)
	requireJSON(t, map[string]any{"articles": 12}, steps["fetch_news"][0].Output)

	var prices struct {
		Symbol string
		Closes []struct {
			Date  string
			Close float64
		}
	}
	require.NoError(t, json.Unmarshal(arts["fetch_prices[0]/prices"].Value, &prices))
	require.Equal(t, "AAPL", prices.Symbol)
	require.Len(t, prices.Closes, 10)
	require.Equal(t, "2025-09-22", prices.Closes[0].Date)
	require.InDelta(t, 258.02, prices.Closes[9].Close, 1e-9)

	// Each of the 4 instances scored its own quarter of the 12 articles
	// (fixtures/news/reuters.json with fixtures/lexicons/sentiment-v2.json).
	type scored = map[string]any
	article := func(id string, score int) scored {
		label := "neutral"
		if score > 0 {
			label = "positive"
		} else if score < 0 {
			label = "negative"
		}
		return scored{"id": id, "score": score, "label": label}
	}
	quarters := []scored{
		{"articles": []scored{article("r-001", 4), article("r-002", 1), article("r-003", -4)}, "positive": 2, "negative": 1, "neutral": 0, "score": 1},
		{"articles": []scored{article("r-004", 5), article("r-005", -2), article("r-006", 0)}, "positive": 1, "negative": 1, "neutral": 1, "score": 3},
		{"articles": []scored{article("r-007", 3), article("r-008", -3), article("r-009", 0)}, "positive": 1, "negative": 1, "neutral": 1, "score": 0},
		{"articles": []scored{article("r-010", 5), article("r-011", -2), article("r-012", 2)}, "positive": 2, "negative": 1, "neutral": 0, "score": 5},
	}
	for i, q := range quarters {
		q["model"] = "sentiment-v2"
		a, ok := arts[fmt.Sprintf("analyze_sentiment[%d]/sentiment", i)]
		require.True(t, ok, "analyze_sentiment[%d] stored sentiment", i)
		require.Equal(t, steps["analyze_sentiment"][i].ID, a.StepID)
		requireJSON(t, q, a.Value)
	}

	requireJSON(t, map[string]any{
		"symbol": "AAPL", "days": 10, "first": 245.5, "last": 258.02, "change": 12.52, "changePct": 5.1,
		"high": 258.02, "low": 245.5, "sma5": 255.94, "direction": "up",
	}, arts["calculate_trends[0]/trends"].Value)

	report := map[string]any{
		"symbol":    "AAPL",
		"articles":  12,
		"analyzers": 4,
		"sentiment": map[string]any{"overall": "positive", "positive": 6, "negative": 4, "neutral": 2, "score": 9},
		"trend":     map[string]any{"direction": "up", "change": 12.52, "changePct": 5.1, "first": 245.5, "last": 258.02},
	}
	requireJSON(t, report, arts["generate_report[0]/report"].Value)
	requireJSON(t, report, steps["generate_report"][0].Output)
}

// TestMarketAnalysisStageFailure runs market_analysis with a generate_report
// that fails: flow.sh is called with MAXQ_FAILED_STAGE, says so and fails
// the run, scheduling nothing more.
func TestMarketAnalysisStageFailure(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	copyTree(t, filepath.Join(examplesRoot(t), "lib"), filepath.Join(root, "lib"))
	copyTree(t, filepath.Join(examplesRoot(t), "market_analysis"), filepath.Join(root, "market_analysis"))
	writeExe(t, filepath.Join(root, "market_analysis", "steps", "generate_report", "step.sh"),
		"echo 'no report today' >&2\nexit 3\n")

	s := newStack(t, root, options{})
	id := s.trigger("market_analysis", nil)
	run := s.wait(id, exampleRunBound)
	require.Equal(t, "failed", run.Status)
	var runErr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &runErr))
	require.Equal(t, "flow_failed", runErr["reason"], "error: %s", run.Error)
	require.Equal(t, "reporting", runErr["failedStage"], "error: %s", run.Error)

	var stages []string
	for _, st := range run.Stages {
		stages = append(stages, st.Name+" "+st.Status)
	}
	require.Equal(t, []string{"data-fetch completed", "analysis completed", "reporting failed"}, stages)
	for _, st := range s.steps(id) {
		if st.Name == "generate_report" {
			require.Equal(t, "failed", st.Status)
			require.Equal(t, 1, st.RetryCount) // maxRetries 1: two attempts
		} else {
			require.Equal(t, "completed", st.Status, st.Name)
		}
	}

	// What the flow's last call printed, on stderr: so it is in the error too.
	require.Contains(t, logLines(t, s, id, ""), "Stage failed: reporting")
	require.Contains(t, runErr["stderr"], "Stage failed: reporting")
}

// TestExamplesWithAPIToken runs market_analysis, which uses every function
// of lib/maxq.sh, against an API that wants a bearer token: the library
// sends the script's MAXQ_TOKEN.
func TestExamplesWithAPIToken(t *testing.T) {
	t.Parallel()
	const apiToken = "examples-api-token-0123456789"
	root := examplesRoot(t)
	cfg := config.Defaults()
	cfg.FlowsRoot = root
	cfg.APIToken = apiToken
	st := store.New(pgtest.Pool(t))
	catalog := flow.Catalog{Root: root}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	apiURL := app.LocalAPIURL(ln.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	handler := api.New(api.Config{Store: st, Catalog: catalog, Tokens: auth.New(apiToken)})
	go func() { done <- app.Serve(ctx, ln, handler, 5*time.Second) }()
	w := worker.New(app.WorkerConfig(cfg, st, catalog, nil, apiURL))
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})

	call := func(method, path string, out any) int {
		req, err := http.NewRequestWithContext(t.Context(), method, apiURL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.NoError(t, json.NewDecoder(res.Body).Decode(out))
		return res.StatusCode
	}
	var run Run
	require.Equal(t, 201, call("POST", "/flows/market_analysis/runs", &run))
	deadline := time.Now().Add(exampleRunBound)
	for run.Status != "completed" && run.Status != "failed" && run.Status != "cancelled" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		require.Equal(t, 200, call("GET", "/runs/"+run.ID, &run))
	}
	if run.Status != "completed" {
		var steps struct{ Steps []Step }
		require.Equal(t, 200, call("GET", "/runs/"+run.ID+"/steps", &steps))
		for _, st := range steps.Steps {
			t.Logf("step %s[%d] %s, started %v, completed %v: %s", st.Name, st.Sequence, st.Status, st.StartedAt != nil, st.CompletedAt != nil, st.Error)
		}
		require.Failf(t, "run failed", "run %s is %s; error: %s", run.ID, run.Status, run.Error)
	}
	var arts struct{ Artifacts []struct{ FullPath string } }
	require.Equal(t, 200, call("GET", "/runs/"+run.ID+"/artifacts?name=report", &arts))
	require.Len(t, arts.Artifacts, 1)
	require.Equal(t, "generate_report[0]/report", arts.Artifacts[0].FullPath)
}

// exampleArtifact is an artifact as the API lists it.
type exampleArtifact struct {
	StepID string          `json:"stepId"`
	Value  json.RawMessage `json:"value"`
	Tags   []string        `json:"tags"`
}

// artifactsByPath lists a run's artifacts by full path.
func artifactsByPath(t *testing.T, s *stack, runID string) map[string]exampleArtifact {
	t.Helper()
	var out struct {
		Artifacts []struct {
			FullPath string `json:"fullPath"`
			exampleArtifact
		} `json:"artifacts"`
	}
	require.Equal(t, 200, s.call("GET", "/runs/"+runID+"/artifacts?limit=1000", nil, &out))
	arts := map[string]exampleArtifact{}
	for _, a := range out.Artifacts {
		arts[a.FullPath] = a.exampleArtifact
	}
	return arts
}

// logLines returns what a step (or with stepID "", flow.sh) printed in a
// run, every attempt.
func logLines(t *testing.T, s *stack, runID, stepID string) []string {
	t.Helper()
	rows, err := s.Store.Pool().Query(t.Context(), `SELECT message FROM log
		WHERE run_id = $1 AND step_id IS NOT DISTINCT FROM nullif($2, '') ORDER BY seq`, runID, stepID)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var m string
		require.NoError(t, rows.Scan(&m))
		lines = append(lines, m)
	}
	require.NoError(t, rows.Err())
	return lines
}

// requireStages checks a run's stages, in order, all completed.
func requireStages(t *testing.T, run Run, names ...string) {
	t.Helper()
	var got []string
	for _, st := range run.Stages {
		got = append(got, st.Name)
		require.Equal(t, "completed", st.Status, "stage %s", st.Name)
	}
	require.Equal(t, names, got)
}

// stepWant is what a step of a completed run should look like.
type stepWant struct {
	Stage     string
	Instances int
}

// exampleStep is a step with its timing, to check the DAG's order.
type exampleStep struct {
	Step
	CompletedAt *int64 `json:"completedAt"`
}

// requireSteps checks that a run has exactly the wanted steps, every
// instance completed at the first attempt, and returns them by name, indexed
// by sequence.
func requireSteps(t *testing.T, s *stack, runID string, want map[string]stepWant) map[string][]exampleStep {
	t.Helper()
	var out struct{ Steps []exampleStep }
	require.Equal(t, 200, s.call("GET", "/runs/"+runID+"/steps?limit=1000", nil, &out))
	byName := map[string][]exampleStep{}
	for _, st := range out.Steps {
		if st.Status != "completed" || st.RetryCount != 0 {
			require.Failf(t, "step did not complete at its first attempt",
				"step %s[%d] is %s after %d retries; error: %s; its log:\n%s", st.Name, st.Sequence,
				st.Status, st.RetryCount, st.Error, strings.Join(logLines(t, s, runID, st.ID), "\n"))
		}
		w, ok := want[st.Name]
		require.True(t, ok, "unexpected step %s", st.Name)
		require.Equal(t, w.Stage, st.Stage, "stage of %s", st.Name)
		byName[st.Name] = append(byName[st.Name], st)
	}
	require.Len(t, byName, len(want))
	for name, w := range want {
		steps := byName[name]
		slices.SortFunc(steps, func(a, b exampleStep) int { return a.Sequence - b.Sequence })
		require.Len(t, steps, w.Instances, "instances of %s", name)
		for i, st := range steps {
			require.Equal(t, i, st.Sequence, "sequences of %s", name)
		}
	}
	return byName
}

// requireAfter checks that every step of later started once every step of
// earlier had completed.
func requireAfter(t *testing.T, later, earlier []exampleStep) {
	t.Helper()
	for _, l := range later {
		for _, e := range earlier {
			require.NotNil(t, l.StartedAt)
			require.NotNil(t, e.CompletedAt, "%s[%d] has completedAt", e.Name, e.Sequence)
			require.GreaterOrEqual(t, *l.StartedAt, *e.CompletedAt,
				"%s[%d] started before %s[%d] completed", l.Name, l.Sequence, e.Name, e.Sequence)
		}
	}
}

// requireJSON checks that got is the JSON encoding of want.
func requireJSON(t *testing.T, want any, got json.RawMessage) {
	t.Helper()
	b, err := json.Marshal(want)
	require.NoError(t, err)
	require.JSONEq(t, string(b), string(got))
}

func mapKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// copyTree copies the directory src to dst, keeping file modes.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, data, info.Mode().Perm()); err != nil {
			return err
		}
		return os.Chmod(target, info.Mode().Perm())
	})
	require.NoError(t, err)
}
