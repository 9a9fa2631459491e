#!/bin/bash
# goodbye: reads greet's artifact and says goodbye.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

GREETING=$(maxq_artifact_get greet greeting | jq -r .message)

echo "Previous greeting was: $GREETING"
echo "Goodbye!"
