#!/bin/bash
# calculate_trends: reads fetch_prices' closes and stores artifact "trends"
# {symbol, days, first, last, change, changePct, high, low, sma5, direction}.
# direction is "up" or "down" when the price moved more than 1%, else "flat".
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../lib/maxq.sh
source "$(dirname "$0")/../../../lib/maxq.sh"

PRICES=$(maxq_artifact_get fetch_prices prices)

TRENDS=$(jq -c '
  def round2: . * 100 | round / 100;
  .symbol as $symbol | .closes | map(.close) as $c
  | if ($c | length) < 2 then error("need at least two closes, have \($c | length)") else . end
  | (($c[-1] - $c[0]) / $c[0] * 100 | round2) as $pct
  | {symbol: $symbol,
     days: ($c | length),
     first: $c[0],
     last: $c[-1],
     change: ($c[-1] - $c[0] | round2),
     changePct: $pct,
     high: ($c | max),
     low: ($c | min),
     sma5: ($c[-5:] | add / length | round2),
     direction: (if $pct > 1 then "up" elif $pct < -1 then "down" else "flat" end)}' <<<"$PRICES")

jq -r '"\(.symbol): \(.first) -> \(.last) over \(.days) days (\(.changePct)%), trend \(.direction)"' <<<"$TRENDS"
maxq_artifact_put trends "$TRENDS"
