package store_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/store"
)

// artifactCase is an artifact to store and what storing it answers.
type artifactCase struct {
	params  store.ArtifactCreateParams
	want    error  // nil: stored
	message string // in the error
}

// A batch of artifacts gets, for each, the answer it would have got alone:
// refusals of every kind beside stored artifacts, the first of two for one
// path stored, and a value PostgreSQL refuses failing only itself.
func TestArtifactsCreateBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(false, store.StepSpec{Name: "a", Instances: 2}, store.StepSpec{Name: "b", Instances: 1})
	other := f.run(false, store.StepSpec{Name: "x", Instances: 1})
	steps := f.steps(runID)
	a0, a1, b0 := steps["a"][0], steps["a"][1], steps["b"][0]
	_, _, err := f.s.StepFinish(f.ctx, store.StepFinishParams{StepID: b0.ID, Completed: true})
	require.NoError(t, err)
	_, err = f.s.ArtifactCreate(f.ctx, store.ArtifactCreateParams{RunID: runID, StepID: a0.ID, StepName: "a",
		Name: "existing", Value: json.RawMessage(`1`)})
	require.NoError(t, err)

	art := func(name string, edit func(p *store.ArtifactCreateParams)) store.ArtifactCreateParams {
		p := store.ArtifactCreateParams{RunID: runID, StepID: a1.ID, StepName: "a", Sequence: 1, Name: name,
			Value: json.RawMessage(`{"b": 1, "a": [true, null]}`)}
		if edit != nil {
			edit(&p)
		}
		return p
	}
	cases := []artifactCase{
		{art("plain", nil), nil, ""},
		{art("no run", func(p *store.ArtifactCreateParams) { p.RunID = "0190a3c0-0000-7000-8000-000000000000" }),
			core.ErrNotFound, "run 0190a3c0-0000-7000-8000-000000000000"},
		{art("bad run id", func(p *store.ArtifactCreateParams) { p.RunID = "x" }), core.ErrNotFound, `run "x"`},
		{art("other run", func(p *store.ArtifactCreateParams) { p.RunID = other }), core.ErrInvalid, "no step " + a1.ID},
		{art("no step", func(p *store.ArtifactCreateParams) { p.StepID = "y" }), core.ErrInvalid, "no step y in this run"},
		{art("wrong name", func(p *store.ArtifactCreateParams) { p.StepName = "b" }), core.ErrInvalid, `named "a", not "b"`},
		{art("wrong sequence", func(p *store.ArtifactCreateParams) { p.Sequence = 1 << 40 }), core.ErrInvalid,
			"has sequence 1, not 1099511627776"},
		{art("finished", func(p *store.ArtifactCreateParams) { p.StepID, p.StepName, p.Sequence = b0.ID, "b", 0 }),
			core.ErrConflict, "is completed"},
		{art("fenced", func(p *store.ArtifactCreateParams) { p.Attempt = 1 }), core.ErrConflict, "attempt 1 of step"},
		{art("existing", func(p *store.ArtifactCreateParams) { p.StepID, p.Sequence = a0.ID, 0 }), core.ErrConflict,
			"artifact a[0]/existing already exists"},
		{art("twice", func(p *store.ArtifactCreateParams) { p.Value = json.RawMessage(`"first"`) }), nil, ""},
		{art("twice", func(p *store.ArtifactCreateParams) { p.Value = json.RawMessage(`"second"`) }), core.ErrConflict,
			"artifact a[1]/twice already exists"},
		{art("not json", func(p *store.ArtifactCreateParams) { p.Value = json.RawMessage(`1, "run_id": "x"`) }),
			core.ErrInvalid, "not JSON"},
		{art("tagged", func(p *store.ArtifactCreateParams) {
			p.Tags, p.Metadata = []string{"x,y", `"q"`, "{}"}, json.RawMessage(`{"k": "v"}`)
		}), nil, ""},
		{art("null metadata", func(p *store.ArtifactCreateParams) { p.Metadata = json.RawMessage(`null`) }), nil, ""},
	}
	var ps []store.ArtifactCreateParams
	for _, c := range cases {
		ps = append(ps, c.params)
	}
	check := func(results []store.ArtifactCreated) {
		t.Helper()
		require.Len(t, results, len(cases))
		for i, c := range cases {
			r := results[i]
			if c.want != nil {
				require.ErrorIs(t, r.Err, c.want, c.params.Name)
				require.ErrorContains(t, r.Err, c.message, c.params.Name)
				continue
			}
			require.NoError(t, r.Err, c.params.Name)
			got, err := f.s.ArtifactGet(f.ctx, runID, r.Artifact.ID)
			require.NoError(t, err)
			require.Equal(t, got, r.Artifact, c.params.Name)
			require.Equal(t, c.params.Name, got.Name)
		}
	}
	results := f.s.ArtifactsCreate(f.ctx, ps)
	check(results)
	require.JSONEq(t, `{"a": [true, null], "b": 1}`, string(results[0].Artifact.Value))
	require.Equal(t, []string{}, results[0].Artifact.Tags)
	require.Nil(t, results[0].Artifact.Metadata)
	require.Equal(t, json.RawMessage(`"first"`), results[10].Artifact.Value)
	require.Equal(t, []string{"x,y", `"q"`, "{}"}, results[13].Artifact.Tags)
	require.Equal(t, json.RawMessage(`null`), results[14].Artifact.Metadata)

	// A value PostgreSQL refuses fails the statement; each artifact is then
	// stored on its own, and only that one fails.
	cases = []artifactCase{
		{art("later", nil), nil, ""},
		{art("lone surrogate", func(p *store.ArtifactCreateParams) { p.Value = json.RawMessage(`"\ud800"`) }),
			core.ErrInvalid, "invalid input syntax for type json"},
		{art("plain", nil), core.ErrConflict, "artifact a[1]/plain already exists"},
	}
	ps = ps[:0]
	for _, c := range cases {
		ps = append(ps, c.params)
	}
	check(f.s.ArtifactsCreate(f.ctx, ps))
}
