package server

import (
	"encoding/json"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// Model aliases (GET and PUT /admin/v1/model-aliases) are this node's own, as its router is: they rename what
// clients ask for at the gateway they enter, before routing, so a hop to another node carries the served
// model's instance and needs none there. A cluster that agents enter through several nodes sets the same
// aliases on each (flags or the dashboard); aliases are not gossiped.

// aliasesBody is the body of both: {"aliases": {"NAME": "MODEL", ...}}.
type aliasesBody struct {
	Aliases map[string]string `json:"aliases"`
}

func (a *adminAPI) getModelAliases(c *fiber.Ctx) error {
	return c.JSON(aliasesBody{Aliases: a.aliases.All()})
}

// putModelAliases replaces every alias of this node. A target need not be served yet: an alias may wait for
// its model to load.
func (a *adminAPI) putModelAliases(c *fiber.Ctx) error {
	var b aliasesBody
	if err := json.Unmarshal(c.Body(), &b); err != nil || b.Aliases == nil {
		return apicore.BadRequest("aliases", `the body must be {"aliases": {"NAME": "MODEL", ...}}`)
	}
	if err := a.aliases.Set(b.Aliases); err != nil {
		return apicore.BadRequest("aliases", "%v", err)
	}
	a.log.Info("model aliases set", "aliases", b.Aliases)
	return c.JSON(aliasesBody{Aliases: a.aliases.All()})
}
