package server

import "github.com/gofiber/fiber/v2"

// responsesRoutes serves OpenAI's Responses API (POST /v1/responses).
func (s *Server) responsesRoutes(v1 fiber.Router) {}
