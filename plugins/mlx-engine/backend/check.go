package backend

import (
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// The checks below are the parts of the contract's argument validation that do not depend on how a backend
// stores its weights or caches. Backends call them and prefix their own name to the errors ("cpu: ...").

// NoContextLimit is the context limit of a model whose config.json states none: positions are then bounded by
// memory only.
const NoContextLimit = 1 << 20

// ContextLimit is the most positions a cache of a model with config c may hold (Model.MaxContext).
func ContextLimit(c model.Config) int {
	if n := c.MaxContext(); n > 0 {
		return n
	}
	return NoContextLimit
}

// CheckSeq checks what Forward requires of sequence i of a batch whatever its cache: at least one token, every
// token in [0, vocab), and a Logits buffer, when there is one, of vocab values. The error names the sequence.
func CheckSeq(i int, s Seq, vocab int) error {
	if len(s.Tokens) == 0 {
		return fmt.Errorf("sequence %d has no tokens", i)
	}
	for _, t := range s.Tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("sequence %d: token %d out of range [0, %d)", i, t, vocab)
		}
	}
	if s.Logits != nil && len(s.Logits) != vocab {
		return fmt.Errorf("sequence %d: logits buffer holds %d values, want %d", i, len(s.Logits), vocab)
	}
	return nil
}

// CheckBatch checks a Forward batch and returns each sequence's cache as the backend's own type C, with the
// position where its tokens start. own resolves one sequence's cache: it fails with ErrForeignCache when the
// cache is not one of this model's, and with the reason when it may not be used (ErrReleased, ...). The rest is
// checked here, sequence by sequence: no cache appears twice, CheckSeq, and LayerLengths.CheckForward against
// limit. Errors name the sequence; the backend adds its name. Nothing is changed, so a refused batch leaves
// every cache as it was.
func CheckBatch[C comparable](batch []Seq, vocab, limit int, own func(Cache) (C, LayerLengths, error)) (caches []C, starts []int, err error) {
	caches, starts = make([]C, len(batch)), make([]int, len(batch))
	seen := make(map[C]bool, len(batch))
	for i, s := range batch {
		c, lens, err := own(s.Cache)
		if err != nil {
			return nil, nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		if seen[c] {
			return nil, nil, fmt.Errorf("sequence %d: the same cache appears twice in one batch", i)
		}
		seen[c] = true
		if err := CheckSeq(i, s, vocab); err != nil {
			return nil, nil, err
		}
		if starts[i], err = lens.CheckForward(len(s.Tokens), limit); err != nil {
			return nil, nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		caches[i] = c
	}
	return caches, starts, nil
}

// LayerLengths counts the positions each layer of a cache holds. Forward advances every layer together;
// ImportKV advances one layer at a time (chunks of the KV wire arrive per layer), so the layers may differ
// until an import is complete. A backend's cache keeps one and leaves to it Len, Truncate and the checks of
// Clone's, ExportKV's and ImportKV's arguments that concern positions and buffer sizes.
type LayerLengths []int

// Len is the number of positions every layer holds: the minimum over layers (Cache.Len).
func (p LayerLengths) Len() int {
	if len(p) == 0 {
		return 0
	}
	n := p[0]
	for _, v := range p {
		n = min(n, v)
	}
	return n
}

// CheckForward checks that Forward may append n positions to the cache and returns the position where they
// start: every layer must hold the same positions (an import left unfinished makes them uneven), and n more must
// fit under limit.
func (p LayerLengths) CheckForward(n, limit int) (start int, err error) {
	for i, v := range p {
		if v != p[0] {
			return 0, fmt.Errorf("cache layers hold different numbers of positions (layer 0: %d, layer %d: %d); finish importing first", p[0], i, v)
		}
	}
	start = p.Len()
	if start+n > limit {
		return 0, fmt.Errorf("%d cached + %d new positions exceed the context limit %d", start, n, limit)
	}
	return start, nil
}

// Truncate keeps the first n positions of every layer (Cache.Truncate).
func (p LayerLengths) Truncate(n int) {
	n = max(n, 0)
	for i := range p {
		p[i] = min(p[i], n)
	}
}

// CheckClone checks that a clone of the first n positions is possible (Cache.Clone).
func (p LayerLengths) CheckClone(n int) error {
	if n < 0 || n > p.Len() {
		return fmt.Errorf("clone of %d positions from a cache holding %d", n, p.Len())
	}
	return nil
}

// CheckLayer checks that layer is one of the cache's layers.
func (p LayerLengths) CheckLayer(layer int) error {
	if layer < 0 || layer >= len(p) {
		return fmt.Errorf("layer %d out of range (model has %d)", layer, len(p))
	}
	return nil
}

// CheckExport checks ExportKV's arguments: the layer exists, it holds positions [from, to), and keys and values
// hold exactly the bytes of those positions in layout l.
func (p LayerLengths) CheckExport(l KVLayout, layer, from, to int, keys, values []byte) error {
	if err := p.CheckLayer(layer); err != nil {
		return err
	}
	if from < 0 || from > to || to > p[layer] {
		return fmt.Errorf("export of positions [%d, %d) from layer %d holding %d", from, to, layer, p[layer])
	}
	tb := l.TokenBytes()
	if len(keys) != (to-from)*tb || len(values) != (to-from)*tb {
		return fmt.Errorf("export of %d positions needs %d-byte buffers, got %d and %d", to-from, (to-from)*tb, len(keys), len(values))
	}
	return nil
}

// CheckImport checks ImportKV's arguments and returns how many positions keys and values hold: the layer
// exists, keys and values are equally long and a whole number of positions in layout l, the import starts
// within what the layer holds (no gap), and it ends within limit positions.
func (p LayerLengths) CheckImport(l KVLayout, limit, layer, from int, keys, values []byte) (n int, err error) {
	if err := p.CheckLayer(layer); err != nil {
		return 0, err
	}
	tb := l.TokenBytes()
	if len(keys) != len(values) || len(keys)%tb != 0 {
		return 0, fmt.Errorf("import of %d key and %d value bytes: want equal multiples of %d bytes per token", len(keys), len(values), tb)
	}
	n = len(keys) / tb
	if from < 0 || from > p[layer] {
		return 0, fmt.Errorf("import at position %d into layer %d holding %d would leave a gap", from, layer, p[layer])
	}
	if from+n > limit {
		return 0, fmt.Errorf("import of positions [%d, %d) exceeds the context limit %d", from, from+n, limit)
	}
	return n, nil
}
