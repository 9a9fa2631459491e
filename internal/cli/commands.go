package cli

// command is one maxq command: its synopsis and help, and what it does.
type command struct {
	name    string // "runs", "stage schedule", "artifact put"
	args    string // synopsis after the name
	summary string // one line, for maxq --help
	details string // more help, for maxq NAME --help
	section string // heading in maxq --help
	run     func(c *cli, cmd *command, args []string) error
}

const (
	sectionRead    = "Runs and their results"
	sectionControl = "Start and control runs"
	sectionScript  = "Inside flow.sh and step.sh (defaults from MAXQ_RUN_ID, MAXQ_STEP_*)"
)

// commands are maxq's commands, in the order maxq --help lists them.
var commands = []command{
	{
		name: "run", args: "FLOW [--input JSON|@FILE|-] [--metadata JSON|@FILE] [--idempotency-key KEY] [--wait] [--timeout DURATION] [--logs]",
		summary: "trigger a run of FLOW; print its id, or follow it to its end with --wait",
		section: sectionControl,
		details: `Triggers a run (POST /flows/FLOW/runs) and prints its id on stdout (with
-o json, the run object).

With --wait, maxq then follows the run until it ends, printing progress on
stderr as stages and steps change: on a terminal a live status line, else
one plain line per change, as CI logs want. --logs (which implies --wait)
also prints every line the run's scripts print, on stderr, as
"[step[seq]] message" and "[flow] message". stdout keeps only the run id
(with -o json, the final run object), so RUN=$(maxq run … --wait) works.

The exit code is the run's: 0 completed, 1 failed or cancelled (its error
is printed on stderr), 2 usage or API error, 3 --timeout passed (the run
keeps going).

The same --idempotency-key for the same flow returns the first run instead
of creating another, so a retried CI job follows the run it started.

Examples:
  maxq run hello_world --input '{"who": "world"}'
  maxq run my_flow --input @input.json --idempotency-key "$CI_PIPELINE_ID" --wait --logs --timeout 30m`,
		run: (*cli).cmdRun,
	},
	{
		name: "cancel", args: "RUN",
		summary: "cancel a pending or running run",
		section: sectionControl,
		details: `Cancels the run (POST /runs/RUN/cancel): its pending and running steps are
cancelled and their scripts stopped. Cancelling a cancelled run again is
fine; a completed or failed run is an error (HTTP 409).`,
		run: (*cli).cmdCancel,
	},
	{
		name: "retry", args: "RUN [--wait] [--timeout DURATION] [--logs]",
		summary: "resume a failed run; --wait follows it like run --wait",
		section: sectionControl,
		details: `Resumes a failed run (POST /runs/RUN/retry): its failed and cancelled steps
go back to pending with fresh retry counts. --wait, --timeout and --logs
work as for 'maxq run', and so does the exit code.`,
		run: (*cli).cmdRetry,
	},
	{
		name: "flows", args: "",
		summary: "list the flows the API finds under its FLOWS_ROOT, and any problems",
		section: sectionRead,
		run:     (*cli).cmdFlows,
	},
	{
		name: "runs", args: "[--flow FLOW] [--status STATUS] [--limit N] [--offset N]",
		summary: "list runs, newest first",
		section: sectionRead,
		run:     (*cli).cmdRuns,
	},
	{
		name: "status", args: "[RUN]",
		summary: "show a run as a tree: stage → step[seq] status retries duration",
		section: sectionRead,
		details: `Shows the run's status and error, then each stage with its steps.`,
		run:     (*cli).cmdStatus,
	},
	{
		name: "steps", args: "[RUN] [--stage STAGE] [--status STATUS] [--name STEP]",
		summary: "list a run's steps",
		section: sectionRead,
		run:     (*cli).cmdSteps,
	},
	{
		name: "logs", args: "[RUN] [--step STEP[SEQ]|ID] [--follow]",
		summary: "print what a run's scripts printed; --follow until the run ends",
		section: sectionRead,
		details: `Prints the run's log lines in order, as "[step[seq]] message" or
"[flow] message". --step keeps one step's lines: a name (every instance),
name[seq] (one instance) or a step id. --follow keeps printing new lines
until the run has ended and every line is printed. With -o json, prints
{"logs": […], "next": cursor}, or with --follow one JSON line per log line.`,
		run: (*cli).cmdLogs,
	},
	{
		name: "artifacts", args: "[RUN] [--step STEP[SEQ]] [--name NAME] [--tag TAG]...",
		summary: "list a run's artifacts",
		section: sectionRead,
		details: `Lists every artifact of the run that matches (all pages). With -o json,
prints {"artifacts": […], "pagination": …} with every value, e.g. to keep
them as a CI artifact: maxq artifacts "$RUN" -o json > artifacts.json`,
		run: (*cli).cmdArtifacts,
	},
	{
		name: "artifact", args: "[RUN] ID [--field PATH]",
		summary: "print one artifact's value as JSON (for jq); see also artifact put|get",
		section: sectionRead,
		details: `Prints the value of artifact ID of RUN as JSON, nothing else. --field
prints one field of it (see 'maxq artifact get --help').`,
		run: (*cli).cmdArtifact,
	},
	{
		name: "stage schedule", args: "--stage STAGE [--final] --step SPEC... | --file FILE|-",
		summary: "schedule a stage of steps (flow.sh)",
		section: sectionScript,
		details: `Schedules a stage of the run (POST /runs/RUN/steps). Each --step is
NAME[:KEY=VALUE,KEY=VALUE…] with the keys
  instances=N        parallel instances (default 1)
  maxRetries=N       retries after a failed attempt (default 0; alias retries)
  dependsOn=A+B      steps (of this stage or an earlier one) to wait for
  timeout=SECONDS    the step's time limit (sets MAXQ_STEP_TIMEOUT)
  env.KEY=VALUE      an environment variable of the step (write \, for a
                     comma in VALUE, \\ for a backslash)
--file takes the whole request body instead ({"stage", "final", "steps"});
"-" reads it from stdin. Prints nothing on success (-o json: the answer).

Example:
  maxq stage schedule --stage scrape --final \
    --step fetch_urls:maxRetries=3 \
    --step scrape_page:instances=10,maxRetries=2,dependsOn=fetch_urls,env.TIMEOUT=30`,
		run: (*cli).cmdStageSchedule,
	},
	{
		name: "artifact put", args: "NAME --value JSON|@FILE|- [--tag TAG]... [--metadata JSON|@FILE]",
		summary: "store an artifact of this step (step.sh)",
		section: sectionScript,
		details: `Stores artifact NAME of the step instance in MAXQ_STEP_ID, MAXQ_STEP_NAME
and MAXQ_STEP_SEQUENCE (POST /runs/RUN/artifacts). Artifacts are
immutable: storing NAME again with the same value succeeds and changes
nothing; with another value it fails (HTTP 409). MAXQ_STEP_ATTEMPT goes
along, so the API refuses (HTTP 409) a script whose step another attempt
has taken over. Prints nothing on success (-o json: the stored artifact).`,
		run: (*cli).cmdArtifactPut,
	},
	{
		name: "artifact get", args: "--step STEP[SEQ] --name NAME [--sequence K] [--all] [--field PATH]",
		summary: "print an artifact's value, or one field of it (step.sh)",
		section: sectionScript,
		details: `Prints the value of artifact STEP[K]/NAME of the run (K defaults to 0, or
comes from --step name[K]). A string is printed as is; anything else as
JSON. --all prints a JSON array of the values of every instance of STEP,
ordered by sequence. --field picks a part of the value, jq-style:
  .user.name   .items[0]   .["odd key"]   [2].id   .
A missing field is an error.`,
		run: (*cli).cmdArtifactGet,
	},
	{
		name: "output", args: "JSON|@FILE|-",
		summary: "set this step's output (step.sh)",
		section: sectionScript,
		details: `Sets the output of the step in MAXQ_STEP_ID (PATCH /steps/ID). The step's
status is still decided by its exit code. MAXQ_STEP_ATTEMPT goes along, as
for 'artifact put'. Prints nothing on success.`,
		run: (*cli).cmdOutput,
	},
	{
		name: "input", args: "[RUN] [--field PATH]",
		summary: "print the run's input, or one field of it (flow.sh, step.sh)",
		section: sectionScript,
		details: `Prints the input the run was triggered with. A string is printed as is;
anything else as JSON. --field picks a part of it (see 'maxq artifact get
--help').`,
		run: (*cli).cmdInput,
	},
}
