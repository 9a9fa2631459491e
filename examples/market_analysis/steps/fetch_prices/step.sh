#!/bin/bash
# fetch_prices: loads the daily closing prices of $SYMBOL (offline, from
# fixtures/prices/$SYMBOL.csv) and stores artifact "prices"
# {symbol, closes: [{date, close}]}, oldest first.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

[[ $SYMBOL =~ ^[A-Z.]+$ ]] || maxq_die "SYMBOL must be a ticker symbol, not \"$SYMBOL\""
CSV=$(dirname "$0")/../../fixtures/prices/$SYMBOL.csv
[[ -r $CSV ]] || maxq_die "no prices for $SYMBOL (no $CSV)"

# CSV "date,close" with a header line.
PRICES=$(jq -Rsc --arg symbol "$SYMBOL" '
  split("\n") | .[1:] | map(select(length > 0) | split(",") | {date: .[0], close: (.[1] | tonumber)})
  | sort_by(.date) | {symbol: $symbol, closes: .}' <"$CSV")
echo "Fetched $(jq '.closes | length' <<<"$PRICES") daily closes of $SYMBOL"

maxq_artifact_put prices "$PRICES" "prices,$SYMBOL"
