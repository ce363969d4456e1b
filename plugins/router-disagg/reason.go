package routerdisagg

import (
	"strconv"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/scorer"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// explain appends the decision's one-sentence reason to b, for example:
//
//	decode on i3@n2 (load 0.80, kv-utilization 0.90, prefix 0.50, locality 0.00; best of 4); prefill on i7@n4
//	over thunderbolt (40 Gb/s), then i8@n5 (approximate: other quantization), because 5200 uncached tokens ≥ 1000
//
// A retry's reason names the instances the request excludes: "best of 3, excluding i1".
//
// It builds the sentence with strconv into a reused buffer: routing stays at a handful of allocations.
func (r *Router) explain(b []byte, v *view.View, dres, pres *sched.Result, ranPrefill bool, verdict prefillVerdict,
	req *router.Request, eps []router.PrefillEndpoint) []byte {
	prompt := req.PromptTokens
	win := dres.Ranked[0]
	b = r.explainDecode(b, win, dres, req)

	switch {
	case ranPrefill && len(eps) > 0:
		b = append(b, "; prefill on "...)
		b = endpointAt(b, eps[0])
		b = append(b, ' ')
		b = path(b, v, eps[0].Node, win.Instance.Node)
		for _, e := range eps[1:] {
			b = append(b, ", then "...)
			b = endpointAt(b, e)
		}
		if verdict.Known {
			b = append(b, ", because "...)
			b = uncached(b, verdict, prompt)
			b = append(b, " ≥ "...)
			b = strconv.AppendInt(b, int64(r.cfg.PrefillThreshold), 10)
		} else {
			b = append(b, ", offered because the prompt length is unknown (the engine decides)"...)
		}
	case ranPrefill:
		b = append(b, "; prefill locally: no prefill candidate ("...)
		b = removed(b, r.prefill, pres)
		b = append(b, ')')
	case verdict.Remote:
		b = append(b, "; prefill locally (remote prefill is off)"...)
	case verdict.Known:
		b = append(b, "; prefill locally because "...)
		b = uncached(b, verdict, prompt)
		b = append(b, " < "...)
		if r.cfg.PD == PDAuto {
			b = strconv.AppendInt(b, int64(r.cfg.Auto.MinTokens), 10)
		} else {
			b = strconv.AppendInt(b, int64(r.cfg.PrefillThreshold), 10)
		}
	default:
		b = append(b, "; prefill locally because the prompt length is unknown"...)
	}
	return b
}

func at(b []byte, id, node string) []byte {
	b = append(b, id...)
	b = append(b, '@')
	return append(b, node...)
}

// endpointAt writes "p@n3", and " (approximate: other quantization)" when the endpoint's KV is not exact.
func endpointAt(b []byte, e router.PrefillEndpoint) []byte {
	b = at(b, e.InstanceID, e.Node)
	if e.Approximate {
		b = append(b, " (approximate: other quantization)"...)
	}
	return b
}

// uncached writes "5200 uncached tokens", with "(of 6000)" when part of the prompt is likely cached.
func uncached(b []byte, verdict prefillVerdict, prompt int) []byte {
	b = strconv.AppendInt(b, int64(verdict.Uncached), 10)
	b = append(b, " uncached tokens"...)
	if verdict.Uncached != prompt {
		b = append(b, " (of "...)
		b = strconv.AppendInt(b, int64(prompt), 10)
		b = append(b, ')')
	}
	return b
}

// path describes the KV path from the prefill node to the decode node.
func path(b []byte, v *view.View, from, to string) []byte {
	if from == to {
		return append(b, "on the same node"...)
	}
	p, ok := scorer.LinkPath(v, from, to)
	if !ok {
		return append(b, "over an unknown path"...)
	}
	b = append(b, "over "...)
	if p.Kind != "" {
		b = append(b, p.Kind...)
	} else {
		b = append(b, "the network"...)
	}
	if p.SpeedMbps > 0 {
		b = append(b, " ("...)
		b = speed(b, p.SpeedMbps)
		b = append(b, ')')
	}
	return b
}

// speed writes a path's speed: "40 Gb/s", "2.5 Gb/s", "100 Mb/s".
func speed(b []byte, mbps int64) []byte {
	if mbps >= 1000 {
		b = strconv.AppendFloat(b, float64(mbps)/1000, 'f', -1, 64)
		return append(b, " Gb/s"...)
	}
	b = strconv.AppendInt(b, mbps, 10)
	return append(b, " Mb/s"...)
}

// removed writes how many candidates there were and what each filter that removed some removed:
// "3 instances; ready removed 2, node-alive removed 1".
func removed(b []byte, p *sched.Profile, res *sched.Result) []byte {
	b = strconv.AppendInt(b, int64(res.Considered), 10)
	if res.Considered == 1 {
		b = append(b, " instance"...)
	} else {
		b = append(b, " instances"...)
	}
	b = append(b, " of the model"...)
	sep := "; "
	for i, f := range p.Filters() {
		if n := res.Removed[i]; n > 0 {
			b = append(b, sep...)
			b = append(b, f.Name()...)
			b = append(b, " removed "...)
			b = strconv.AppendInt(b, int64(n), 10)
			sep = ", "
		}
	}
	return b
}

// explainDecode writes the decode clause: "decode on i3@n2 (load 0.80, ...; best of 4)".
func (r *Router) explainDecode(b []byte, win sched.Ranked, dres *sched.Result, req *router.Request) []byte {
	b = append(b, "decode on "...)
	b = at(b, win.Instance.ID, win.Instance.Node)
	b = append(b, " ("...)
	for j, w := range r.decode.Scorers() {
		if j > 0 {
			b = append(b, ", "...)
		}
		b = append(b, w.Scorer.Name()...)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, dres.Score(win, j), 'f', 2, 64)
	}
	if len(r.decode.Scorers()) > 0 {
		b = append(b, "; "...)
	}
	b = append(b, "best of "...)
	b = strconv.AppendInt(b, int64(dres.Survivors()), 10)
	for i, id := range req.Exclude {
		if i == 0 {
			b = append(b, ", excluding "...)
		} else {
			b = append(b, ", "...)
		}
		b = append(b, id...)
	}
	return append(b, ')')
}
