package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/maxq-dev/maxq/internal/core"
)

// LogLine is one line a script printed.
type LogLine struct {
	RunID      string
	StepID     string // empty for flow.sh output
	FlowCallID string // empty for step output
	Attempt    int    // the attempt of the step or flow call that printed it
	Level      string // info (stdout) or error (stderr)
	Message    string
	Data       json.RawMessage
	CreatedAt  int64
}

// LogSource is what the lines of one output stream of one attempt share.
type LogSource struct {
	RunID      string
	StepID     string // empty for flow.sh output
	FlowCallID string // empty for step output
	Attempt    int
	Level      string          // info (stdout) or error (stderr)
	Data       json.RawMessage // may be nil
}

// LogBatch is lines for one LogWrite, each copied into one buffer as it is
// added, so adding a line allocates nothing once the batch has grown; Reset
// keeps the buffers for the next batch. It is not safe for concurrent use.
type LogBatch struct {
	sources []LogSource
	// Per line: its source's index (4 bytes), created_at (8), the
	// message's length (4) and the message.
	lines        []byte
	count        int
	messageBytes int
	// For LogWrite, kept from batch to batch so that a write allocates
	// next to nothing: which sources are current, the parameters of the
	// query that says so, and the reader COPY takes the lines from.
	current []bool
	params  []byte
	values  [3][]byte // slices of params
	copy    logCopy
}

// NewLogBatch returns an empty batch with room for lines lines of size
// bytes of messages in all.
func NewLogBatch(lines, size int) *LogBatch {
	return &LogBatch{lines: make([]byte, 0, lines*lineHeader+size)}
}

// lineHeader is the size of what LogBatch.lines holds of a line besides
// its message.
const lineHeader = 16

// Reset empties the batch, keeping its buffers.
func (b *LogBatch) Reset() {
	clear(b.sources)
	b.sources = b.sources[:0]
	b.lines = b.lines[:0]
	b.count, b.messageBytes = 0, 0
}

// Len is the number of lines in the batch.
func (b *LogBatch) Len() int { return b.count }

// Size is the number of message bytes in the batch.
func (b *LogBatch) Size() int { return b.messageBytes }

// Capacity is the memory the batch's buffers hold.
func (b *LogBatch) Capacity() int { return cap(b.lines) + cap(b.params) + cap(b.copy.head) }

// AddSource adds what the lines of a stream share, and returns the index
// to add them with.
func (b *LogBatch) AddSource(s LogSource) int {
	b.sources = append(b.sources, s)
	return len(b.sources) - 1
}

// Add adds a line of the source with the given index, copying the
// message, which must be valid UTF-8 without NUL bytes, as PostgreSQL text
// is.
func (b *LogBatch) Add(source int, message []byte, createdAt int64) {
	be := binary.BigEndian
	b.lines = be.AppendUint32(be.AppendUint64(be.AppendUint32(b.lines, uint32(source)), uint64(createdAt)), uint32(len(message)))
	b.lines = append(b.lines, message...)
	b.count++
	b.messageBytes += len(message)
}

// logCurrentSQL finds the sources whose attempt is the current one of
// their step or flow call: what a superseded attempt printed (its worker
// was paused past its lease, say) is dropped.
const logCurrentSQL = `
SELECT s.n - 1
FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS s(step_id, flow_call_id, attempt, n)
WHERE EXISTS (SELECT 1 FROM step t WHERE t.id = NULLIF(s.step_id, '') AND t.attempt = s.attempt)
   OR EXISTS (SELECT 1 FROM flow_call f WHERE f.id = NULLIF(s.flow_call_id, '') AND f.attempt = s.attempt)`

// logCopySQL takes the lines, in the order of logCopy's fields.
const logCopySQL = `COPY log (run_id, step_id, flow_call_id, level, data, id, message, created_at) FROM STDIN (FORMAT binary)`

// LogWrite writes a batch of lines of current attempts, in their order: a
// query for which sources are current, then a COPY of their lines, so the
// lines go from the batch to the connection through a buffer of pgconn's
// pool with nothing allocated per line. (An attempt superseded between the
// two, within a round trip, still gets in what it printed before, as with
// any write that races the claim.) The batch is left as it was, for the
// caller to retry or Reset.
//
// A worker whose script prints without pause writes a batch every few
// milliseconds, so a write allocates little: both statements go through
// pgconn, with parameters and rows encoded in buffers the batch keeps,
// where pgx's own encoding and row reading would allocate a few kilobytes;
// and ctx's deadline is set on the connection for the two statements,
// which is what pgconn does when a ctx it watches expires, without the
// watch, which costs a few allocations a statement. So cancelling ctx
// stops the wait for a connection, not a write under way; past the
// deadline the connection breaks and the pool drops it.
func (s *Store) LogWrite(ctx context.Context, b *LogBatch) error {
	if b.count == 0 {
		return nil
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("append log lines: %w", interpretError(err))
	}
	defer c.Release()
	conn := c.Conn().PgConn()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.Conn().SetDeadline(deadline)
		defer func() { _ = conn.Conn().SetDeadline(time.Time{}) }()
	}
	ctx = context.WithoutCancel(ctx)
	if err := b.findCurrent(ctx, conn); err != nil {
		return fmt.Errorf("append log lines: %w", interpretError(err))
	}
	if !slices.Contains(b.current, true) {
		return nil
	}
	b.copy.start(b)
	if _, err := conn.CopyFrom(ctx, &b.copy, logCopySQL); err != nil {
		return fmt.Errorf("append log lines: %w", interpretError(err))
	}
	return nil
}

// binaryResult asks for a statement's one result column in binary.
var binaryResult = []int16{1}

// findCurrent sets b.current, running logCurrentSQL with its arrays in
// text form.
func (b *LogBatch) findCurrent(ctx context.Context, conn *pgconn.PgConn) error {
	p := b.params[:0]
	p = append(p, '{')
	for i, src := range b.sources {
		p = appendArrayText(p, i, src.StepID)
	}
	p = append(p, '}')
	steps := len(p)
	p = append(p, '{')
	for i, src := range b.sources {
		p = appendArrayText(p, i, src.FlowCallID)
	}
	p = append(p, '}')
	calls := len(p)
	p = append(p, '{')
	for i, src := range b.sources {
		if i > 0 {
			p = append(p, ',')
		}
		p = strconv.AppendInt(p, int64(src.Attempt), 10)
	}
	p = append(p, '}')
	b.params = p
	b.values = [3][]byte{p[:steps], p[steps:calls], p[calls:]}

	n := len(b.sources)
	b.current = slices.Grow(b.current[:0], n)[:n]
	clear(b.current)
	rr := conn.ExecParams(ctx, logCurrentSQL, b.values[:], nil, nil, binaryResult)
	for rr.NextRow() {
		v := rr.Values()
		if len(v) != 1 || len(v[0]) != 8 {
			continue // cannot be: one bigint
		}
		if i := binary.BigEndian.Uint64(v[0]); i < uint64(n) {
			b.current[i] = true
		}
	}
	_, err := rr.Close()
	return err
}

// appendArrayText appends s as the i-th element of a text array in
// PostgreSQL's text form, quoted.
func appendArrayText(p []byte, i int, s string) []byte {
	if i > 0 {
		p = append(p, ',')
	}
	p = append(p, '"')
	for j := 0; j < len(s); j++ {
		if s[j] == '"' || s[j] == '\\' {
			p = append(p, '\\')
		}
		p = append(p, s[j])
	}
	return append(p, '"')
}

// logCopy is a batch's lines as COPY's binary format, read a row at a
// time: the fields before a line's message are encoded into head, and the
// message is read straight from the batch, so what a write holds besides
// the batch is a row's fields, however long the lines.
type logCopy struct {
	b      *LogBatch
	idTime int64 // in the lines' IDs
	off    int   // in b.lines: the next line
	done   bool  // the trailer is pending, or read
	// What is left to read of the current row: a slice of head, the
	// message, a slice of tail.
	pending [3][]byte
	head    []byte
	tail    [16]byte
	// Random bits for the lines' IDs, read a chunk at a time.
	random     [64 * idRandomBytes]byte
	randomUsed int
}

// pgcopySignature starts COPY's binary format.
const pgcopySignature = "PGCOPY\n\xff\r\n\x00"

// start readies r to read b from the start.
func (r *logCopy) start(b *LogBatch) {
	be := binary.BigEndian
	*r = logCopy{b: b, idTime: time.Now().UnixMilli(), head: r.head[:0], randomUsed: len(r.random)}
	r.head = be.AppendUint32(be.AppendUint32(append(r.head, pgcopySignature...), 0), 0) // flags, extension
	r.pending[0] = r.head
}

func (r *logCopy) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		i := 0
		for i < len(r.pending) && len(r.pending[i]) == 0 {
			i++
		}
		if i == len(r.pending) {
			if !r.next() {
				break
			}
			continue
		}
		c := copy(p[n:], r.pending[i])
		r.pending[i] = r.pending[i][c:]
		n += c
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// next makes the next row of a current source (or the trailer, after the
// last) pending; it reports false when there is nothing left.
func (r *logCopy) next() bool {
	b, be := r.b, binary.BigEndian
	for r.off < len(b.lines) {
		line := b.lines[r.off:]
		src := int(be.Uint32(line))
		at := be.Uint64(line[4:])
		size := int(be.Uint32(line[12:]))
		message := line[lineHeader : lineHeader+size]
		r.off += lineHeader + size
		if !b.current[src] {
			continue
		}
		if r.randomUsed == len(r.random) {
			_, _ = rand.Read(r.random[:])
			r.randomUsed = 0
		}
		random := r.random[r.randomUsed : r.randomUsed+idRandomBytes]
		r.randomUsed += idRandomBytes
		s := &b.sources[src]
		h := be.AppendUint16(r.head[:0], 8) // fields
		h = appendField(h, s.RunID)
		h = appendField(h, s.StepID)
		h = appendField(h, s.FlowCallID)
		h = appendField(h, s.Level)
		if s.Data == nil {
			h = be.AppendUint32(h, math.MaxUint32) // -1: NULL
		} else {
			h = append(be.AppendUint32(h, uint32(len(s.Data)+1)), 1) // jsonb's version
			h = append(h, s.Data...)
		}
		h = appendLogID(be.AppendUint32(h, 36), r.idTime, random)
		h = be.AppendUint32(h, uint32(size))
		r.head = h
		tail := be.AppendUint64(be.AppendUint32(r.tail[:0], 8), at)
		r.pending = [3][]byte{h, message, tail}
		return true
	}
	if r.done {
		return false
	}
	r.done = true
	r.pending = [3][]byte{be.AppendUint16(r.tail[:0], math.MaxUint16)} // -1: the end
	return true
}

// appendField appends a text field; the empty string is NULL.
func appendField(p []byte, s string) []byte {
	if s == "" {
		return binary.BigEndian.AppendUint32(p, math.MaxUint32)
	}
	return append(binary.BigEndian.AppendUint32(p, uint32(len(s))), s...)
}

// idRandomBytes is how many random bytes a line's ID takes.
const idRandomBytes = 10

// appendLogID appends a line's ID: a UUIDv7 (RFC 9562) like newID's,
// but of random bits given, so a batch's IDs take one read of random
// bytes and no allocation; in text form, as UUID.String gives it.
func appendLogID(p []byte, unixMilli int64, random []byte) []byte {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:], uint64(unixMilli)<<16) // 48 bits of time
	copy(u[6:], random)
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // RFC 9562 variant
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	return append(p, buf[:]...)
}

// LogAppend writes lines in one batch.
func (s *Store) LogAppend(ctx context.Context, lines []LogLine) error {
	size := 0
	for _, l := range lines {
		size += len(l.Message)
	}
	b := NewLogBatch(len(lines), size)
	src := -1
	for _, l := range lines {
		p := LogSource{RunID: l.RunID, StepID: l.StepID, FlowCallID: l.FlowCallID, Attempt: l.Attempt, Level: l.Level, Data: l.Data}
		if src < 0 || !sameSource(p, b.sources[src]) {
			src = b.AddSource(p)
		}
		b.Add(src, []byte(l.Message), l.CreatedAt)
	}
	return s.LogWrite(ctx, b)
}

func sameSource(a, b LogSource) bool {
	return a.RunID == b.RunID && a.StepID == b.StepID && a.FlowCallID == b.FlowCallID && a.Attempt == b.Attempt &&
		a.Level == b.Level && bytes.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// LogEntry is a stored line of a run's output.
type LogEntry struct {
	Seq        int64           `json:"seq"`
	StepID     *string         `json:"stepId"`
	StepName   *string         `json:"stepName"`
	Sequence   *int            `json:"sequence"`
	FlowCallID *string         `json:"flowCallId"`
	Level      string          `json:"level"`
	Message    string          `json:"message"`
	Data       json.RawMessage `json:"data"`
	CreatedAt  int64           `json:"createdAt"`
	// Cursor is this line's place in commit order; pass the last one seen
	// as LogListParams.After.
	Cursor string `json:"cursor"`
}

// LogListParams selects a run's log lines after a cursor.
type LogListParams struct {
	RunID  string
	StepID string // optional
	After  string // the Cursor of the last line already seen; "" from the start
	Limit  int
}

// ParseLogCursor checks a cursor a client sent.
func ParseLogCursor(c string) bool {
	_, _, ok := splitCursor(c)
	return ok
}

func splitCursor(c string) (xact, seq string, ok bool) {
	if c == "" {
		return "0", "0", true
	}
	xact, seq, found := strings.Cut(c, ".")
	if !found || !digits(xact) || !digits(seq) || len(xact) > 19 || len(seq) > 18 {
		return "", "", false
	}
	return xact, seq, true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// LogList returns up to Limit lines of a run (or of one of its steps) that
// come after the cursor After, in commit order (and, within one write,
// the order they were printed). While the run is not finished, it returns
// only lines of transactions older than every transaction still running,
// so no line can later commit behind a cursor it handed out.
func (s *Store) LogList(ctx context.Context, p LogListParams) ([]LogEntry, error) {
	if err := s.runExists(ctx, p.RunID); err != nil {
		return nil, err
	}
	if p.StepID != "" && !validID(p.StepID) {
		return []LogEntry{}, nil
	}
	xact, seq, ok := splitCursor(p.After)
	if !ok {
		return nil, core.Invalid("after", "not a cursor from this API")
	}
	where, args := filters{}.
		add("l.run_id = $%d", p.RunID, true).
		add("l.step_id = $%d", p.StepID, p.StepID != "").
		add("(l.xact_id, l.seq) > ($%d::text::xid8, ", xact, true).
		build()
	args = append(args, seq)
	where += fmt.Sprintf("$%d::bigint)", len(args))
	where += ` AND (l.xact_id < pg_snapshot_xmin(pg_current_snapshot())
		OR (SELECT status FROM run WHERE id = l.run_id) IN ('completed', 'failed', 'cancelled'))`
	rows, err := s.pool.Query(ctx, `SELECT l.seq, l.step_id, s.name, s.sequence, l.flow_call_id, l.level, l.message, l.data,
		    l.created_at, l.xact_id::text || '.' || l.seq
		FROM log l LEFT JOIN step s ON s.id = l.step_id`+where+fmt.Sprintf(" ORDER BY l.xact_id, l.seq LIMIT $%d", len(args)+1),
		append(args, p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list log lines: %w", interpretError(err))
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LogEntry, error) {
		var e LogEntry
		err := row.Scan(&e.Seq, &e.StepID, &e.StepName, &e.Sequence, &e.FlowCallID, &e.Level, &e.Message, &e.Data,
			&e.CreatedAt, &e.Cursor)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list log lines: %w", interpretError(err))
	}
	if lines == nil {
		lines = []LogEntry{}
	}
	return lines, nil
}
