#!/bin/bash
# MAXQ_SPEC_VERSION: 1.0
# hello_world: two stages, one step each (spec §9.1).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/maxq.sh
source "$(dirname "$0")/../lib/maxq.sh"

# A failed stage ends the run (MaxQ calls us with MAXQ_FAILED_STAGE set).
if [[ -n $MAXQ_FAILED_STAGE ]]; then
  echo "Stage failed: $MAXQ_FAILED_STAGE" >&2
  exit 1
fi

case "$MAXQ_COMPLETED_STAGE" in
  "")
    # First call: say hello.
    maxq_schedule greeting false "$(maxq_step greet --env NAME=World)"
    ;;
  greeting)
    # Second call: say goodbye, and end the run.
    maxq_schedule farewell true "$(maxq_step goodbye --depends-on greet)"
    ;;
esac
