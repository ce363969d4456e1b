package server

import "github.com/gofiber/fiber/v2"

// anthropicRoutes serves Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens).
func (s *Server) anthropicRoutes(v1 fiber.Router) {}

// anthropicErrors is the dialect of errors under /v1/messages; nil until the API is served.
func anthropicErrors() dialect { return nil }
