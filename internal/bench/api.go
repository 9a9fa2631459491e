package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// scratchTableSQL is the table of the API scenario's floor: a single-row
// INSERT and a SELECT by primary key of a row like an artifact's.
const scratchTableSQL = `CREATE TABLE IF NOT EXISTS bench_scratch (
    id         TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL,
    value      JSONB NOT NULL,
    created_at BIGINT NOT NULL
)`

// runAPI measures two busy endpoints from many keep-alive clients on
// loopback, against the same number of connections doing the plainest SQL
// on the same database. No worker runs: the run's steps stay pending, and
// a pending step may store artifacts.
func runAPI(ctx context.Context, s *suite) error {
	big := s.size.burnSteps
	if _, err := s.st.writeFlow(flowSpec{name: "api", flow: noopScript, steps: sameSteps(noopScript, "work")}); err != nil {
		return err
	}
	clients, d := s.size.apiClients, s.size.apiTime
	// One step per client, as when that many steps store their artifacts.
	runID, err := s.st.trigger(ctx, "api")
	if err != nil {
		return err
	}
	steps, err := s.st.schedule(ctx, runID, stageSpec{Stage: "work", Steps: []stepSpec{{Name: "work", Instances: clients}}})
	if err != nil {
		return err
	}
	stepIDs := make([]string, clients)
	for _, st := range steps {
		stepIDs[st.Sequence] = st.ID
	}
	bigRun, err := s.st.trigger(ctx, "api")
	if err != nil {
		return err
	}
	if _, err := s.st.schedule(ctx, bigRun, stageSpec{Stage: "work", Steps: []stepSpec{{Name: "work", Instances: big}}}); err != nil {
		return err
	}
	post, err := hammer(ctx, clients, d, func(ctx context.Context, c, i int) error {
		body := fmt.Appendf(nil, `{"stepId":%q,"stepName":"work","sequence":%d,"name":"a-%d","value":{"n":%d}}`, stepIDs[c], c, i, i)
		return s.st.do(ctx, http.MethodPost, "/runs/"+runID+"/artifacts", body, http.StatusCreated)
	})
	if err != nil {
		return err
	}
	get, err := hammer(ctx, clients, d, func(ctx context.Context, _, _ int) error {
		return s.st.do(ctx, http.MethodGet, "/runs/"+runID, nil, http.StatusOK)
	})
	if err != nil {
		return err
	}
	getBig, err := hammer(ctx, clients, d, func(ctx context.Context, _, _ int) error {
		return s.st.do(ctx, http.MethodGet, "/runs/"+bigRun, nil, http.StatusOK)
	})
	if err != nil {
		return err
	}

	pcfg, err := pgxpool.ParseConfig(s.st.dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns, pcfg.MinConns = int32(clients), int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	inserted := make([]int, clients)
	insert, err := hammer(ctx, clients, d, func(ctx context.Context, c, i int) error {
		_, err := pool.Exec(ctx, `INSERT INTO bench_scratch (id, run_id, value, created_at) VALUES ($1, $2, $3, $4)`,
			strconv.Itoa(c)+"-"+strconv.Itoa(i), runID, fmt.Sprintf(`{"n":%d}`, i), time.Now().UnixMilli())
		inserted[c] = i + 1
		return err
	})
	if err != nil {
		return err
	}
	selectRow, err := hammer(ctx, clients, d, func(ctx context.Context, c, _ int) error {
		id := strconv.Itoa(c) + "-" + strconv.Itoa(rand.IntN(max(inserted[c], 1)))
		var value []byte
		return pool.QueryRow(ctx, `SELECT value FROM bench_scratch WHERE id = $1`, id).Scan(&value)
	})
	if err != nil {
		return err
	}

	r := s.report
	fig := func(what string) string { return fmt.Sprintf("%s, %d clients", what, clients) }
	r.versus("api", fig("POST /runs/{id}/artifacts req/s (floor: INSERT)"), post.rate, insert.rate, "req/s").
		target("≥ 50% of INSERT", post.rate >= insert.rate/2)
	r.versus("api", "POST /runs/{id}/artifacts p99 (floor: INSERT)", post.lat.pct(99), insert.lat.pct(99), "ms")
	r.versus("api", fig(fmt.Sprintf("GET /runs/{id} req/s, %d steps (floor: SELECT)", clients)), get.rate, selectRow.rate, "req/s")
	r.versus("api", fmt.Sprintf("GET /runs/{id} p99, %d steps (floor: SELECT)", clients), get.lat.pct(99), selectRow.lat.pct(99), "ms")
	r.versus("api", fig(fmt.Sprintf("GET /runs/{id} req/s, %d steps (floor: SELECT)", big)), getBig.rate, selectRow.rate, "req/s")
	r.versus("api", fmt.Sprintf("GET /runs/{id} p99, %d steps (floor: SELECT)", big), getBig.lat.pct(99), selectRow.lat.pct(99), "ms")
	return nil
}

// hammerResult is what hammer measured.
type hammerResult struct {
	n    int
	rate float64 // requests a second
	lat  samples // ms
}

// hammer calls fn from clients goroutines, each in a loop, for d, and
// returns the rate and the latencies. fn gets the client's number and its
// request count.
func hammer(ctx context.Context, clients int, d time.Duration, fn func(ctx context.Context, client, i int) error) (hammerResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var res hammerResult
	var errs []error
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			var lat samples
			for i := 0; time.Now().Before(deadline); i++ {
				t := time.Now()
				if err := fn(ctx, c, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
					return
				}
				lat = append(lat, ms(time.Since(t)))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.n = len(res.lat)
	res.rate = float64(res.n) / time.Since(start).Seconds()
	return res, errors.Join(errs...)
}

// do sends one request with a raw body and checks its status, reading and
// discarding the answer so the connection is reused.
func (st *stack) do(ctx context.Context, method, path string, body []byte, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, st.apiURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := st.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 1000))
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, msg)
	}
	_, err = io.Copy(io.Discard, res.Body)
	return err
}
