package server

import "github.com/gofiber/fiber/v2"

// ollamaRoutes serves Ollama's API under /api.
func (s *Server) ollamaRoutes(api fiber.Router) {}

// ollamaErrors is the dialect of errors under /api; nil until the API is served.
func ollamaErrors() dialect { return nil }
