# shellcheck shell=bash
#
# maxq.sh: helpers for MaxQ flows (flow.sh) and steps (step.sh), spec
# Appendix C. Needs bash, curl and jq, nothing else.
#
# Source it from a script, locating it relative to the script itself so the
# working directory does not matter:
#
#   flow.sh:  source "$(dirname "$0")/../lib/maxq.sh"
#   step.sh:  source "$(dirname "$0")/../../../lib/maxq.sh"
#
# The functions use what MaxQ puts in a script's environment: MAXQ_API and
# MAXQ_RUN_ID everywhere, MAXQ_STEP_ID, MAXQ_STEP_NAME and MAXQ_STEP_SEQUENCE
# in steps, and MAXQ_TOKEN (when the API requires one) as the bearer token;
# MAXQ_API_TOKEN, when set, wins over it. They work under `set -euo pipefail`.
#
# Conventions:
#   - A function that reads prints JSON on stdout (compact, one line); pipe
#     it through `jq -r` for plain text. A function that writes prints
#     nothing on success.
#   - When the API answers an error, or cannot be reached, a function prints
#     one line on stderr -- the request, the HTTP status and the API's error
#     body -- and returns 1. Under `set -e` the script then stops.
#   - JSON is always built with jq, and large values travel on stdin, so no
#     quoting or argument-length limit can break a request.
#
# Functions:
#   maxq_step NAME [OPTIONS]              print one step definition
#   maxq_schedule STAGE FINAL [STEPS...]  schedule a stage (flow.sh)
#   maxq_artifact_put NAME VALUE [TAGS] [METADATA]
#                                         store an artifact of this step
#   maxq_artifact_get STEP NAME [SEQ]     print one artifact's value
#   maxq_artifacts STEP NAME [TAGS]       print the values of all sequences
#   maxq_output JSON                      set this step's output
#   maxq_log MESSAGE...                   write a line to the script's log
#   maxq_die MESSAGE...                   write a line to stderr and exit 1
#   maxq_api METHOD PATH [BODY]           any API call; prints the answer
#
# A future `maxq` command-line client may take these over; the functions'
# names and behaviour are the interface to keep.

# Sourcing twice is harmless.
if [[ -n ${_MAXQ_SH_LOADED:-} ]]; then
  return 0
fi
_MAXQ_SH_LOADED=1

# MAXQ_HTTP_TIMEOUT bounds each request, in seconds.
: "${MAXQ_HTTP_TIMEOUT:=60}"

# maxq_log MESSAGE...
#   Writes MESSAGE as one line on stdout, which MaxQ stores in the run's log
#   at level info (stderr is stored at level error). Do not call it inside a
#   $(...) whose output you use.
maxq_log() {
  printf '%s\n' "$*"
}

# maxq_die MESSAGE...
#   Writes "MESSAGE" on stderr and exits the script with status 1 (in a
#   $(...) subshell it ends only the subshell, which fails the command).
maxq_die() {
  printf '%s\n' "$*" >&2
  exit 1
}

# maxq_api METHOD PATH [BODY]
#   Sends METHOD to $MAXQ_API/PATH (PATH starts with "/", e.g.
#   "/runs/$MAXQ_RUN_ID") with BODY as JSON when given ("-" reads it from
#   stdin), and prints the API's answer on stdout. On an error answer it
#   prints the status and the error body on stderr and returns 1.
#
#   maxq_api GET "/runs/$MAXQ_RUN_ID" | jq -r .status
maxq_api() {
  if (($# < 2 || $# > 3)); then
    _maxq_usage "maxq_api METHOD PATH [BODY]"
    return 2
  fi
  _maxq_need MAXQ_API || return 1
  local method=$1 path=$2
  if (($# == 3)); then
    local body=$3
    if [[ $body == - ]]; then
      body=$(cat) || return 1
    fi
    _maxq_request "$method" "$path" "$body" || return 1
  else
    _maxq_request "$method" "$path" || return 1
  fi
  _maxq_check "$method" "$path" || return 1
  printf '%s\n' "$_MAXQ_BODY"
}

# maxq_step NAME [--instances N] [--retries N] [--depends-on A,B]
#                [--env KEY=VALUE]... [--timeout SECONDS]
#   Prints the JSON definition of one step for maxq_schedule. Defaults: 1
#   instance, 0 retries, no dependencies, no env. --timeout sets
#   MAXQ_STEP_TIMEOUT, the step's time limit.
#
#   maxq_step scrape_page --instances 10 --retries 2 --depends-on fetch_urls --env TIMEOUT=30
maxq_step() {
  if (($# < 1)); then
    _maxq_usage "maxq_step NAME [--instances N] [--retries N] [--depends-on A,B] [--env KEY=VALUE]... [--timeout SECONDS]"
    return 2
  fi
  local name=$1 instances=1 retries=0 depends="" env='{}'
  shift
  while (($# > 0)); do
    if (($# < 2)); then
      echo "maxq_step: $1 needs a value" >&2
      return 2
    fi
    case $1 in
      --instances) instances=$2 ;;
      --retries) retries=$2 ;;
      --depends-on) depends=$2 ;;
      --env | --timeout)
        local key value
        if [[ $1 == --timeout ]]; then
          key=MAXQ_STEP_TIMEOUT value=$2
        elif [[ $2 == *=* ]]; then
          key=${2%%=*} value=${2#*=}
        else
          echo "maxq_step: --env wants KEY=VALUE, not \"$2\"" >&2
          return 2
        fi
        env=$(jq -c --arg k "$key" --arg v "$value" '. + {($k): $v}' <<<"$env") || return 1
        ;;
      *)
        echo "maxq_step: unknown option \"$1\"" >&2
        return 2
        ;;
    esac
    shift 2
  done
  if ! [[ $instances =~ ^[0-9]+$ && $retries =~ ^[0-9]+$ ]]; then
    echo "maxq_step: --instances and --retries want whole numbers (got \"$instances\", \"$retries\")" >&2
    return 2
  fi
  jq -nc --arg name "$name" --argjson instances "$instances" --argjson retries "$retries" \
    --arg depends "$depends" --argjson env "$env" \
    '{name: $name,
      dependsOn: ($depends | split(",") | map(gsub("^\\s+|\\s+$"; "") | select(length > 0))),
      instances: $instances,
      maxRetries: $retries,
      env: $env}'
}

# maxq_schedule STAGE FINAL [STEPS...]
#   Schedules stage STAGE of this run (POST /runs/{id}/steps); FINAL is
#   "true" for the run's last stage, else "false". Each STEPS argument is a
#   JSON step object (see maxq_step) or a JSON array of them, "@FILE" to read
#   one from a file, or "-" to read one from stdin; with no STEPS the steps
#   are read from stdin. Prints nothing on success.
#
#   maxq_schedule greeting false "$(maxq_step greet --env NAME=World)"
#   maxq_schedule fetch false '[{"name": "fetch_urls", "instances": 1, "maxRetries": 3}]'
#   maxq_schedule fetch false @stages/fetch.json
maxq_schedule() {
  if (($# < 2)); then
    _maxq_usage "maxq_schedule STAGE FINAL [STEPS_JSON | @FILE | -]..."
    return 2
  fi
  _maxq_need MAXQ_API MAXQ_RUN_ID || return 1
  local stage=$1 final=$2
  shift 2
  if [[ $final != true && $final != false ]]; then
    echo "maxq_schedule: FINAL must be true or false, not \"$final\"" >&2
    return 2
  fi
  (($# > 0)) || set -- -
  local steps="" arg
  for arg in "$@"; do
    case $arg in
      -) steps+=$(cat) || return 1 ;;
      @*)
        steps+=$(cat -- "${arg#@}") || {
          echo "maxq_schedule: cannot read ${arg#@}" >&2
          return 1
        }
        ;;
      *) steps+=$arg ;;
    esac
    steps+=$'\n'
  done
  local body
  body=$(jq -sc --arg stage "$stage" --argjson final "$final" '
    map(if type == "array" then .[] elif type == "object" then . else error("a step must be a JSON object, not \(type)") end)
    | {stage: $stage, final: $final, steps: .}' <<<"$steps") || {
    echo "maxq_schedule: stage $stage: the steps are not valid JSON" >&2
    return 1
  }
  _maxq_request POST "/runs/$MAXQ_RUN_ID/steps" "$body" || return 1
  _maxq_check POST "/runs/$MAXQ_RUN_ID/steps" || return 1
}

# maxq_artifact_put NAME VALUE_JSON [TAGS_CSV] [METADATA_JSON]
#   Stores artifact NAME of this step instance, with VALUE_JSON as its value
#   ("-" reads it from stdin), e.g. "a,b" as tags and an optional metadata
#   object. Artifacts are immutable: storing NAME again with the very same
#   value succeeds and changes nothing, with another value it fails (HTTP
#   409). (A failed attempt's artifacts are discarded, so a retry starts
#   afresh.) The step's attempt (MAXQ_STEP_ATTEMPT) goes with it, so an
#   attempt that was superseded — its worker lost — is refused (HTTP 409).
#
#   maxq_artifact_put greeting "$(jq -nc --arg m "Hello, $NAME!" '{message: $m}')"
#   jq -c . result.json | maxq_artifact_put result - processed,v2
maxq_artifact_put() {
  if (($# < 2 || $# > 4)); then
    _maxq_usage "maxq_artifact_put NAME VALUE_JSON|- [TAGS_CSV] [METADATA_JSON]"
    return 2
  fi
  _maxq_need MAXQ_API MAXQ_RUN_ID MAXQ_STEP_ID MAXQ_STEP_NAME MAXQ_STEP_SEQUENCE || return 1
  local name=$1 value=$2 tags=${3:-} metadata=${4:-null}
  if [[ $value == - ]]; then
    value=$(cat) || return 1
  fi
  local body
  body=$(jq -c --arg stepId "$MAXQ_STEP_ID" --arg stepName "$MAXQ_STEP_NAME" \
    --argjson sequence "$MAXQ_STEP_SEQUENCE" --arg name "$name" --arg tags "$tags" \
    --arg attempt "${MAXQ_STEP_ATTEMPT:-}" --argjson metadata "$metadata" '
      {stepId: $stepId, stepName: $stepName, sequence: $sequence, name: $name, value: .,
       tags: ($tags | split(",") | map(gsub("^\\s+|\\s+$"; "") | select(length > 0)))}
      + if $metadata == null then {} else {metadata: $metadata} end
      + if $attempt == "" then {} else {attempt: ($attempt | tonumber)} end' <<<"$value") || {
    echo "maxq_artifact_put: artifact $name: the value (or metadata) is not valid JSON" >&2
    return 1
  }
  local path="/runs/$MAXQ_RUN_ID/artifacts"
  _maxq_request POST "$path" "$body" || return 1
  if [[ $_MAXQ_STATUS == 409 ]]; then
    # Already stored with this very value? Then there is nothing to do.
    local stored
    if stored=$(_maxq_artifact_value "$MAXQ_STEP_NAME" "$name" "$MAXQ_STEP_SEQUENCE" 2>/dev/null) &&
      printf '%s\n%s\n' "$value" "$stored" | jq -se '.[0] == .[1]' >/dev/null 2>&1; then
      return 0
    fi
  fi
  _maxq_check POST "$path"
}

# maxq_artifact_get STEP NAME [SEQUENCE]
#   Prints the value of artifact STEP[SEQUENCE]/NAME of this run (SEQUENCE
#   defaults to 0), as compact JSON. Fails when there is no such artifact.
#
#   GREETING=$(maxq_artifact_get greet greeting | jq -r .message)
maxq_artifact_get() {
  if (($# < 2 || $# > 3)); then
    _maxq_usage "maxq_artifact_get STEP NAME [SEQUENCE]"
    return 2
  fi
  _maxq_need MAXQ_API MAXQ_RUN_ID || return 1
  _maxq_artifact_value "$1" "$2" "${3:-0}"
}

# maxq_artifacts STEP NAME [TAGS_CSV]
#   Prints a JSON array of the values of artifact NAME stored by every
#   instance of STEP, ordered by sequence ([] when there are none). An empty
#   STEP or NAME matches any; TAGS_CSV keeps artifacts with any of the tags.
#
#   maxq_artifacts scrape_page page_content | jq '[.[].words] | add'
maxq_artifacts() {
  if (($# < 2 || $# > 3)); then
    _maxq_usage "maxq_artifacts STEP NAME [TAGS_CSV]"
    return 2
  fi
  _maxq_need MAXQ_API MAXQ_RUN_ID || return 1
  local query="sortBy=sequence&sortOrder=asc&limit=1000"
  [[ -z $1 ]] || query+="&stepName=$(_maxq_uri "$1")"
  [[ -z $2 ]] || query+="&name=$(_maxq_uri "$2")"
  [[ -z ${3:-} ]] || query+="&tags=$(_maxq_uri "$3")"
  local offset=0 pages="" total count
  while :; do
    local path="/runs/$MAXQ_RUN_ID/artifacts?$query&offset=$offset"
    _maxq_request GET "$path" || return 1
    _maxq_check GET "$path" || return 1
    pages+=$_MAXQ_BODY$'\n'
    read -r total count < <(jq -r '"\(.pagination.total) \(.artifacts | length)"' <<<"$_MAXQ_BODY") || return 1
    offset=$((offset + count))
    if ((count == 0 || offset >= total)); then
      break
    fi
  done
  jq -sc '[.[].artifacts[]] | sort_by(.sequence) | map(.value)' <<<"$pages"
}

# maxq_output JSON
#   Sets this step's output (PATCH /steps/{id}) to JSON ("-" reads it from
#   stdin); the step's status is left to its exit code.
#
#   maxq_output "$(jq -nc --argjson n "$TOTAL" '{totalPages: $n}')"
maxq_output() {
  if (($# != 1)); then
    _maxq_usage "maxq_output JSON|-"
    return 2
  fi
  _maxq_need MAXQ_API MAXQ_STEP_ID || return 1
  local value=$1 body
  if [[ $value == - ]]; then
    value=$(cat) || return 1
  fi
  body=$(jq -c --arg attempt "${MAXQ_STEP_ATTEMPT:-}" \
    '{output: .} + if $attempt == "" then {} else {attempt: ($attempt | tonumber)} end' <<<"$value") || {
    echo "maxq_output: the output is not valid JSON" >&2
    return 1
  }
  local path="/steps/$MAXQ_STEP_ID"
  _maxq_request PATCH "$path" "$body" || return 1
  _maxq_check PATCH "$path"
}

# --- internals

# _maxq_artifact_value STEP NAME SEQUENCE prints one artifact's value.
_maxq_artifact_value() {
  local path
  path="/runs/$MAXQ_RUN_ID/artifacts?stepName=$(_maxq_uri "$1")&name=$(_maxq_uri "$2")&sequence=$(_maxq_uri "$3")&limit=1"
  _maxq_request GET "$path" || return 1
  _maxq_check GET "$path" || return 1
  if ! jq -c 'if (.artifacts | length) == 0 then error("none") else .artifacts[0].value end' <<<"$_MAXQ_BODY" 2>/dev/null; then
    echo "maxq: run $MAXQ_RUN_ID has no artifact $1[$3]/$2" >&2
    return 1
  fi
}

# _maxq_request METHOD PATH [BODY] sends one request and leaves the answer
# in _MAXQ_STATUS and _MAXQ_BODY. It fails only when no answer came.
_maxq_request() {
  local method=$1 url=$MAXQ_API$2 out
  local args=(-sS -X "$method" -H "Accept: application/json" --max-time "$MAXQ_HTTP_TIMEOUT"
    -w $'\n%{http_code}')
  if [[ $method == GET ]]; then
    args+=(--retry 3 --retry-connrefused --retry-delay 1)
  fi
  # The bearer token goes to curl on file descriptor 3, not on its command
  # line, so that no process listing shows it.
  local token=${MAXQ_API_TOKEN:-${MAXQ_TOKEN:-}}
  if [[ -n $token ]]; then
    args+=(-H @/dev/fd/3)
  fi
  _MAXQ_STATUS=000 _MAXQ_BODY=""
  if (($# >= 3)); then
    out=$(curl "${args[@]}" -H "Content-Type: application/json" --data-binary @- -- "$url" \
      <<<"$3" 3<<<"Authorization: Bearer $token")
  else
    out=$(curl "${args[@]}" -- "$url" 3<<<"Authorization: Bearer $token")
  fi || {
    echo "maxq: $method $url: no answer from the API (curl exit status $?)" >&2
    return 1
  }
  _MAXQ_STATUS=${out##*$'\n'}
  _MAXQ_BODY=${out%$'\n'*}
  while [[ $_MAXQ_BODY == *$'\n' ]]; do
    _MAXQ_BODY=${_MAXQ_BODY%$'\n'}
  done
}

# _maxq_check METHOD PATH fails with a message when the last answer was not
# a success.
_maxq_check() {
  if [[ $_MAXQ_STATUS == 2?? ]]; then
    return 0
  fi
  local body
  body=$(jq -c . <<<"$_MAXQ_BODY" 2>/dev/null) || body=$_MAXQ_BODY
  echo "maxq: $1 $MAXQ_API$2: HTTP $_MAXQ_STATUS: ${body:-(empty answer)}" >&2
  return 1
}

# _maxq_need VAR... fails when a variable MaxQ should have set is empty.
_maxq_need() {
  local v
  for v in "$@"; do
    if [[ -z ${!v:-} ]]; then
      echo "maxq: $v is not set; ${FUNCNAME[1]} must run under MaxQ (flow.sh or step.sh)" >&2
      return 1
    fi
  done
}

# _maxq_uri TEXT prints TEXT percent-encoded for a URL query.
_maxq_uri() {
  jq -rn --arg v "$1" '$v | @uri'
}

_maxq_usage() {
  echo "usage: $1" >&2
}
