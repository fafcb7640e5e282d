package propagation

// What the external tests reach of the package's internals: the building
// of a simple line's baggage and the two extractions, to hold the first
// to OpenTelemetry's parser and the second to the stock extraction.
var (
	SimpleBaggage   = simpleBaggage
	ExtractLine     = extractLine
	ResetAndExtract = resetAndExtract
)
