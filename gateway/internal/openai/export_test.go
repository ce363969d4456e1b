package openai

import "github.com/duet-ai/duet/gateway/internal/apicore"

// ParseChatSlow is ParseChat without its fast path for common messages, which must not change any result.
func ParseChatSlow(body []byte) (ChatRequest, *apicore.Error) { return parseChat(body, false) }

// DecodesPlain tells whether ParseChat's fast decoder takes body.
func DecodesPlain(body []byte) bool { return decodePlainChat(body, new(chatBody)) }
