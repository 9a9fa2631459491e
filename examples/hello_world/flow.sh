#!/bin/bash
# MAXQ_SPEC_VERSION: 1.0
# hello_world: two stages, one step each (spec §9.1).
set -euo pipefail

schedule_stage() {
  curl -fsS -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" \
    -H "Content-Type: application/json" \
    -d "$1"
}

if [ -z "$MAXQ_COMPLETED_STAGE" ]; then
  # First call: say hello.
  schedule_stage '{
    "stage": "greeting",
    "final": false,
    "steps": [
      { "name": "greet", "dependsOn": [], "instances": 1, "maxRetries": 0, "env": { "NAME": "World" } }
    ]
  }'
elif [ "$MAXQ_COMPLETED_STAGE" = "greeting" ]; then
  # Second call: say goodbye, and end the run.
  schedule_stage '{
    "stage": "farewell",
    "final": true,
    "steps": [
      { "name": "goodbye", "dependsOn": ["greet"], "instances": 1, "maxRetries": 0, "env": {} }
    ]
  }'
fi
