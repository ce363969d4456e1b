package toolcall_test

import (
	"encoding/json"
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
)

// A Qwen 3 output streamed token by token: reasoning, then a call whose marker and JSON arrive in pieces.
func ExampleParser() {
	f := toolcall.Detect("... <tool_call> ... <think> ...", nil) // the chat template's text
	tools, _ := toolcall.ParseTools(json.RawMessage(`[{"type": "function", "function": {"name": "get_weather",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`))
	p, _ := toolcall.NewParser(f, toolcall.Options{Tools: tools, NewID: toolcall.NewIDs(f.Calls, 1)})
	tokens := []string{"<think>", "\nParis", " weather.\n", "</think>", "\n\n", "<tool", "_call>", "\n{\"name\": \"get",
		"_weather\", \"arguments\": {\"city\":", " \"Paris\"}}", "\n</tool_call>"}
	for _, tok := range tokens {
		for _, d := range p.Feed(tok) {
			switch d.Kind {
			case toolcall.CallStart:
				fmt.Println(d.Kind, d.Index, d.ID, d.Name)
			case toolcall.CallArguments:
				fmt.Println(d.Kind, d.Index, d.Text)
			default:
				fmt.Printf("%s %q\n", d.Kind, d.Text)
			}
		}
	}
	res, _, err := p.Finish()
	fmt.Printf("%+v %v\n", res, err)
	// Output:
	// reasoning "Paris"
	// reasoning " weather."
	// call_start 0 call_yUuBGu5T4DNbArva064LJuGg get_weather
	// call_arguments 0 {"city":
	// call_arguments 0 "Paris"}
	// {Content: Reasoning:Paris weather. Calls:[{Index:0 ID:call_yUuBGu5T4DNbArva064LJuGg Name:get_weather Arguments:{"city":"Paris"}}]} <nil>
}

// A call to a tool the request does not define: no delta, and an error the engine can show the client.
func ExampleCallError() {
	tools := []toolcall.Tool{{Name: "get_weather"}}
	p, _ := toolcall.NewParser(toolcall.Format{Calls: toolcall.CallsMistral}, toolcall.Options{Tools: tools})
	p.Feed(`[TOOL_CALLS]get_wether[ARGS]{"city": "Paris"}`)
	_, _, err := p.Finish()
	fmt.Println(err)
	// Output:
	// toolcall: call 0 ("get_wether"): call to a tool the request does not define: "get_wether" is not one of "get_weather" in "[TOOL_CALLS]get_wether[ARGS]{\"city\": \"Paris\"}"
}
