package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/anishathalye/porcupine"
)

// The linearizability model: a partition is an append-only log (Kafka's
// model of it), checked by porcupine one partition at a time.
//
// The state is the log's end as far as the history shows: one past the
// highest offset appended, or the last end offset answered. Offsets may
// have gaps the history cannot see (transaction markers, a produce that
// timed out and was never read), but the offsets of the appends the
// history knows are known in advance (acknowledged, or read), so:
//
//   - append(value) → o is legal when o is the lowest known append offset
//     at or above end, and the end becomes o+1 (an acknowledged produce at
//     its acknowledged offset; a produce that failed indefinitely but was
//     read, at the offset it was read at, with no return: it may take
//     effect at any time). Taking a higher one first could only lead to a
//     dead end (the lower one could never follow), so the model refuses it
//     at once: porcupine then tries one order of the appends, not all
//     the orders of those in flight together;
//   - read(o) → value is legal when o < end (the position's value is
//     checked apart, by inconsistent-offsets: one value per offset). A read
//     is the first poll that returned offset o, as an instant at the
//     poll's return: the fetch happened at some earlier moment (kgo
//     fetches ahead of PollFetches) when o was below the end, and the end
//     never decreases, so o is below it at the return too. An instant
//     keeps porcupine fast (a read concurrent with every earlier
//     operation multiplies the orders it tries);
//   - endOffset → n is legal when end ≤ n and no known append lies in
//     [end, n), and the end becomes n: every offset below n is taken, so a
//     later append lands at n or above.
//
// What this catches beyond the other checks: an append acknowledged
// before another began but placed after it, a record read before its
// produce began, an end offset that went backwards or was answered below
// an acknowledged record.
type linOp struct {
	kind   linKind
	key    partitionKey
	value  string // append: the value; read: the value read
	offset int64  // read: the offset read
	// appends are the offsets of the partition's known appends, sorted
	// (shared by the partition's operations).
	appends *[]int64
}

// nextAppend is the lowest known append offset at or above end, or -1.
func (in linOp) nextAppend(end int64) int64 {
	offs := *in.appends
	i := sort.Search(len(offs), func(i int) bool { return offs[i] >= end })
	if i == len(offs) {
		return -1
	}
	return offs[i]
}

type linKind int

const (
	linAppend linKind = iota
	linRead
	linEnd
)

var logModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[partitionKey][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(linOp).key
			byKey[k] = append(byKey[k], op)
		}
		keys := slices.SortedFunc(maps.Keys(byKey), comparePartitionKeys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		end, in := state.(int64), input.(linOp)
		switch in.kind {
		case linAppend:
			o := output.(int64)
			return o >= end && in.nextAppend(end) == o, o + 1
		case linRead:
			return in.offset < end, end
		default:
			n := output.(int64)
			next := in.nextAppend(end)
			return end <= n && (next < 0 || next >= n), n
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linOp)
		switch in.kind {
		case linAppend:
			return fmt.Sprintf("append %q → %d", in.value, output.(int64))
		case linRead:
			return fmt.Sprintf("read %d → %q", in.offset, in.value)
		default:
			return fmt.Sprintf("end → %d", output.(int64))
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("end %d", state.(int64)) },
}

func comparePartitionKeys(x, y partitionKey) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
}

// linearizableOps turns the history into porcupine operations, by
// partition.
func linearizableOps(a *analysis) map[partitionKey][]porcupine.Operation {
	clients := map[string]int{}
	clientID := func(process string) int {
		id, ok := clients[process]
		if !ok {
			id = len(clients)
			clients[process] = id
		}
		return id
	}
	never := a.lastTime + 1 // the return of an operation that never returned
	ops := map[partitionKey][]porcupine.Operation{}
	addOp := func(k partitionKey, op porcupine.Operation) { ops[k] = append(ops[k], op) }
	for _, p := range a.produces {
		switch {
		case p.state == acked:
			k := partitionKey{p.at.topic, p.at.partition}
			addOp(k, porcupine.Operation{ClientId: clientID(p.process), Input: linOp{kind: linAppend, key: k, value: p.value},
				Call: p.invokeTime, Output: p.at.offset, Return: p.returnTime})
		case p.state != failedDefinitely && len(a.readPos[p.value]) > 0 && len(a.byValue[p.value]) == 1:
			// (A reused value's reads cannot be attributed: reported.)
			at := slices.MinFunc(a.readPos[p.value], func(x, y pos) int { return cmp.Compare(x.offset, y.offset) })
			k := partitionKey{at.topic, at.partition}
			addOp(k, porcupine.Operation{ClientId: clientID(p.process), Input: linOp{kind: linAppend, key: k, value: p.value},
				Call: p.invokeTime, Output: at.offset, Return: never})
		}
	}
	for at, byValue := range a.readsAt {
		var first *read
		for _, rs := range byValue {
			for i := range rs {
				if first == nil || rs[i].time < first.time {
					first = &rs[i]
				}
			}
		}
		k := partitionKey{at.topic, at.partition}
		addOp(k, porcupine.Operation{ClientId: clientID(first.process), Input: linOp{kind: linRead, key: k, value: first.value, offset: at.offset},
			Call: first.time, Output: first.value, Return: first.time})
	}
	for _, e := range a.ends {
		addOp(e.key, porcupine.Operation{ClientId: clientID(e.process), Input: linOp{kind: linEnd, key: e.key},
			Call: e.invokeTime, Output: e.end, Return: e.returnTime})
	}
	for _, partitionOps := range ops {
		appends := new([]int64)
		for i, op := range partitionOps {
			in := op.Input.(linOp)
			if in.kind == linAppend {
				*appends = append(*appends, op.Output.(int64))
			}
			in.appends = appends
			partitionOps[i].Input = in
		}
		slices.Sort(*appends)
	}
	return ops
}

func checkLinearizable(a *analysis, rep *Report, opts Options) {
	byKey := linearizableOps(a)
	var history []porcupine.Operation
	var checked []partitionKey
	for _, k := range slices.SortedFunc(maps.Keys(byKey), comparePartitionKeys) {
		ops := byKey[k]
		if len(ops) > opts.MaxLinearizableOps {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s/%d not checked for linearizability: %d operations, above the bound of %d", k.topic, k.partition, len(ops), opts.MaxLinearizableOps))
			continue
		}
		history = append(history, ops...)
		checked = append(checked, k)
	}
	rep.Stats.LinearizableOps, rep.Stats.PartitionsLinearized = len(history), len(checked)
	res, info := porcupine.CheckOperationsVerbose(logModel, history, opts.LinearizableTimeout)
	rep.Linearizable, rep.linearization, rep.linearized = res, info, true
	switch res {
	case porcupine.Illegal:
		// Name each partition that fails and the first operation its
		// longest legal order cannot place (porcupine's partitions come in
		// the order of checked).
		for i, partials := range info.PartialLinearizationsOperations() {
			k, ops := checked[i], byKey[checked[i]]
			if porcupine.CheckOperations(logModel, ops) {
				continue
			}
			var longest []porcupine.Operation
			for _, l := range partials {
				if len(l) > len(longest) {
					longest = l
				}
			}
			rep.add(NonLinearizable, "%s/%d: no order of its %d operations is an append-only log's (porcupine); the longest legal order places %d, and cannot place %s",
				k.topic, k.partition, len(ops), len(longest), describeFirstUnplaced(ops, longest))
		}
	case porcupine.Unknown:
		rep.Notes = append(rep.Notes, fmt.Sprintf("porcupine gave up after %s: linearizability unknown", opts.LinearizableTimeout))
	}
}

// describeFirstUnplaced describes the operation that returned first among
// those of ops not in placed.
func describeFirstUnplaced(ops, placed []porcupine.Operation) string {
	in := map[linOp]bool{}
	for _, op := range placed {
		in[opKey(op)] = true
	}
	var first *porcupine.Operation
	for i, op := range ops {
		if !in[opKey(op)] && (first == nil || op.Return < first.Return) {
			first = &ops[i]
		}
	}
	if first == nil {
		return "any further operation"
	}
	return logModel.DescribeOperation(first.Input, first.Output)
}

// opKey identifies an operation of a partition: appends by value, reads
// by offset, end answers by value and time.
func opKey(op porcupine.Operation) linOp {
	in := op.Input.(linOp)
	in.appends = nil
	if in.kind == linEnd {
		in.offset = op.Call<<1 ^ op.Output.(int64)
	}
	return in
}
