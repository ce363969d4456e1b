package modelgen

import (
	_ "embed"
	"strings"
)

// corpusText is a few pages of plain English written for this project. The tokenizer's merges are learned from
// it (plus generated sentences), and the embedded model's output layer is biased towards its token bigrams, so
// that what the default model says reads like words.
//
//go:embed corpus.txt
var corpusText string

// grammar produces simple, varied English sentences from small word lists, to give the merge learner and the
// bigram statistics more text than the hand-written pages alone.
var grammar = struct {
	det, adj, noun, verbPast, verbNow, prep, place, time, person, adv []string
}{
	det:      []string{"the", "a", "this", "that", "every", "one", "our", "your", "my", "their"},
	adj:      []string{"small", "old", "new", "quiet", "bright", "warm", "cold", "green", "long", "short", "happy", "busy", "simple", "clear", "dark", "soft", "strong", "early", "late", "good"},
	noun:     []string{"river", "house", "garden", "city", "road", "tree", "book", "letter", "window", "door", "table", "friend", "child", "teacher", "bird", "boat", "train", "market", "street", "field", "program", "question", "answer", "story", "song", "morning", "evening", "village", "bridge", "lamp", "kitchen", "machine", "idea", "plan", "word"},
	verbPast: []string{"saw", "found", "made", "opened", "closed", "carried", "painted", "followed", "watched", "built", "read", "wrote", "heard", "cleaned", "moved", "fixed", "visited", "left", "helped", "started"},
	verbNow:  []string{"see", "find", "make", "open", "carry", "paint", "follow", "watch", "build", "read", "write", "hear", "clean", "move", "fix", "visit", "help", "start", "like", "need"},
	prep:     []string{"near", "behind", "across", "under", "over", "beside", "after", "before", "around", "through"},
	place:    []string{"the river", "the old bridge", "the market", "the garden", "the station", "the school", "the hills", "the sea", "the city", "the forest"},
	time:     []string{"in the morning", "at night", "every day", "last week", "in the spring", "after lunch", "on Sunday", "before dinner", "this year", "at noon"},
	person:   []string{"I", "we", "you", "they"},
	adv:      []string{"slowly", "quickly", "quietly", "carefully", "often", "always", "sometimes", "never", "again", "together"},
}

// generatedSentences returns n sentences drawn deterministically from the grammar.
func generatedSentences(r *rng, n int) string {
	g := &grammar
	pick := func(xs []string) string { return xs[r.intn(len(xs))] }
	capital := func(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
	var b strings.Builder
	for i := 0; i < n; i++ {
		var s string
		switch r.intn(8) {
		case 0:
			s = capital(pick(g.det)) + " " + pick(g.adj) + " " + pick(g.noun) + " " + pick(g.verbPast) + " " + pick(g.det) + " " + pick(g.noun) + " " + pick(g.prep) + " " + pick(g.place) + "."
		case 1:
			s = capital(pick(g.person)) + " " + pick(g.verbNow) + " " + pick(g.det) + " " + pick(g.adj) + " " + pick(g.noun) + " " + pick(g.time) + "."
		case 2:
			s = "Do you know where " + pick(g.det) + " " + pick(g.noun) + " is?"
		case 3:
			s = capital(pick(g.person)) + " " + pick(g.adv) + " " + pick(g.verbPast) + " the " + pick(g.noun) + ", and then " + pick(g.person) + " " + pick(g.verbPast) + " the " + pick(g.noun) + "."
		case 4:
			s = "The " + pick(g.noun) + " is " + pick(g.adj) + ", but the " + pick(g.noun) + " is " + pick(g.adj) + "."
		case 5:
			s = capital(pick(g.time)) + ", " + pick(g.person) + " " + pick(g.verbPast) + " a " + pick(g.adj) + " " + pick(g.noun) + " " + pick(g.prep) + " " + pick(g.place) + "."
		case 6:
			s = "Can you " + pick(g.verbNow) + " the " + pick(g.noun) + " " + pick(g.adv) + "?"
		case 7:
			s = "Yes, " + pick(g.person) + " can " + pick(g.verbNow) + " it " + pick(g.time) + "."
		}
		b.WriteString(s)
		if r.intn(5) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// trainingText is the text the tokenizer and the bigram statistics are learned from.
func trainingText(seed uint64) string {
	return corpusText + generatedSentences(newRNG(seed, "corpus"), 3000)
}
