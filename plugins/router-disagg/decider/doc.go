// Package decider says when the prefill profile runs: when the part of the prompt the decode instance will
// have to compute is long enough that another machine computing it and shipping the KV cache pays off. exo
// uses a threshold of 1000 uncached tokens; below it, the transfer and its setup cost more than they save.
//
// The decode engine has the last word (it counts the exact uncached tokens after tokenizing and looking up
// its prefix cache, and prefills locally below its own threshold or on any failure), so the router may offer
// endpoints when it cannot tell: an unknown prompt length offers them when WhenUnknown is set.
package decider
