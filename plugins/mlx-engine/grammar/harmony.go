package grammar

// Harmony is OpenAI's chat format for gpt-oss. The prompt ends with <|start|>assistant; the model then writes
// messages, each a header (<|channel|>CHANNEL and, for a call, a recipient and content type), <|message|>, a
// body and an end. The control tokens are special tokens, matched whole with Special; <|call|> and
// <|return|> also end generation, so the index a harmony grammar runs on must be built from
// Vocabulary.Unstop(HarmonyEnds...).
const (
	harmonyStart     = "<|start|>"
	harmonyChannel   = "<|channel|>"
	harmonyMessage   = "<|message|>"
	harmonyEnd       = "<|end|>"
	harmonyConstrain = "<|constrain|>"
	harmonyCall      = "<|call|>"
	harmonyReturn    = "<|return|>"
)

// HarmonyEnds are the harmony tokens that end generation and that harmony grammars name: a forced call ends
// with <|call|>, a final answer with <|return|>.
var HarmonyEnds = []string{harmonyCall, harmonyReturn}

// harmonyAnalysis is the one analysis message a constrained harmony output may start with: free text, no
// special token, then the end of the message and the header of the next one.
func harmonyAnalysis() Node {
	return Optional(Seq(Special(harmonyChannel), Literal("analysis"), Special(harmonyMessage), Text(),
		Special(harmonyEnd), Special(harmonyStart), Literal("assistant")))
}

// HarmonyCall matches a forced tool call as gpt-oss writes it: an optional analysis message, then
//
//	<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGUMENTS<|call|>
//
// with ARGUMENTS valid for NAME's parameters. Harmony ends the turn at a call, so there is one call per
// output. Errors are as ToolCallObject's.
func HarmonyCall(tools []Tool, opts Options) (Node, error) {
	call, err := ToolCalls(tools, opts, func(name string, args Node) Node {
		return Seq(Literal(name+" "), Special(harmonyConstrain), Literal("json"), Special(harmonyMessage), args)
	})
	if err != nil {
		return Node{}, err
	}
	return Seq(harmonyAnalysis(), Special(harmonyChannel), Literal("commentary to=functions."), call,
		Special(harmonyCall)), nil
}

// HarmonyFinal matches a constrained answer (a response format) as gpt-oss writes it: an optional analysis
// message, then <|channel|>final<|message|>ANSWER<|return|>.
func HarmonyFinal(answer Node) Node {
	return Seq(harmonyAnalysis(), Special(harmonyChannel), Literal("final"), Special(harmonyMessage), answer,
		Special(harmonyReturn))
}
