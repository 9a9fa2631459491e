package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The scripts of the generated flows. Step scripts are no-ops run by sh,
// the cheapest script there is, so what is measured is MaxQ; scripts that
// must say when they ran use bash for $EPOCHREALTIME, a clock read without
// a fork.
const (
	noopScript = "#!/bin/sh\nexit 0\n"

	// recordScript appends "run step time" to $BENCH_OUT (set in the
	// stage's env) as soon as it runs.
	recordScript = "#!/bin/bash\nprintf '%s %s %s\\n' \"$MAXQ_RUN_ID\" \"$MAXQ_STEP_NAME\" \"$EPOCHREALTIME\" >> \"$BENCH_OUT\"\n"

	// driverFlow schedules the stage in stage.json (beside it) on the
	// first call; the stage is final, so there is no other call.
	driverFlow = `#!/bin/sh
[ -z "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || exit 0
exec curl -sSf -o /dev/null -X POST -H 'Content-Type: application/json' --data-binary @stage.json "$MAXQ_API/runs/$MAXQ_RUN_ID/steps"
`

	// holdFlow keeps its run open, without a step slot, while the
	// benchmark schedules the run's stages itself; the calls that their
	// completions queue wait behind it. Cancelling the run ends it.
	holdFlow = "#!/bin/sh\nexec sleep 3600\n"
)

// stagesFlow schedules stage st<n> of the one step n<n> after stage
// st<n-1> completes, up to st<total-1>, which is final. It appends
// "run completed-stage time" to starts.log as soon as it runs.
func stagesFlow(total int) string {
	return `#!/bin/bash
printf '%s %s %s\n' "$MAXQ_RUN_ID" "$MAXQ_COMPLETED_STAGE" "$EPOCHREALTIME" >> starts.log
n=0
[ -z "$MAXQ_COMPLETED_STAGE" ] || n=$(( ${MAXQ_COMPLETED_STAGE#st} + 1 ))
final=false
[ "$n" -lt ` + strconv.Itoa(total-1) + ` ] || final=true
exec curl -sSf -o /dev/null -X POST -H 'Content-Type: application/json' \
  -d "{\"stage\":\"st$n\",\"final\":$final,\"steps\":[{\"name\":\"n$n\",\"instances\":1,\"maxRetries\":0}]}" \
  "$MAXQ_API/runs/$MAXQ_RUN_ID/steps"
`
}

// flowSpec is a flow to generate under FLOWS_ROOT.
type flowSpec struct {
	name  string
	flow  string            // flow.sh
	steps map[string]string // step name → step.sh
	stage *stageSpec        // written to stage.json for driverFlow
}

// writeFlow (re)creates a flow directory.
func (st *stack) writeFlow(f flowSpec) (string, error) {
	dir := filepath.Join(st.flows, f.name)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := writeExe(filepath.Join(dir, "flow.sh"), f.flow); err != nil {
		return "", err
	}
	for name, body := range f.steps {
		if err := writeExe(filepath.Join(dir, "steps", name, "step.sh"), body); err != nil {
			return "", err
		}
	}
	if f.stage != nil {
		b, err := json.Marshal(f.stage)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "stage.json"), b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func writeExe(path, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o755)
}

// sameSteps maps every name to the same script.
func sameSteps(script string, names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = script
	}
	return m
}

// numbered returns prefix0 … prefix(n-1), zero-padded to width when width
// is set.
func numbered(prefix string, n, width int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + fmt.Sprintf("%0*d", width, i)
	}
	return out
}

// parseEpoch reads bash's $EPOCHREALTIME (seconds with microseconds, the
// decimal separator depending on the locale) as epoch milliseconds.
func parseEpoch(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.Replace(s, ",", ".", 1), 64)
	if err != nil {
		return 0, err
	}
	return v * 1000, nil
}
