// The API page's Swagger UI over the portal's own OpenAPI document. In a file, not inline:
// the page's Content-Security-Policy runs scripts of the portal's own origin only.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
