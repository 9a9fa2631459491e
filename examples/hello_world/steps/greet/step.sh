#!/bin/bash
# greet: says hello to $NAME and stores the greeting for the next step.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

# NAME comes from the stage's env (flow.sh).
# shellcheck disable=SC2153
echo "Hello, $NAME!"
maxq_artifact_put greeting "$(jq -nc --arg message "Hello, $NAME!" '{message: $message}')"
