// Package fuzzobj is the one decoding of the model's fuzz inputs into API
// objects: the Services of servicemodel's FuzzNormalize and FuzzTracker and
// the EndpointSlices of endpoints' FuzzSliceMerge and FuzzTracker.
//
// It exists so that the same corpora drive every layer. The fuzz targets
// decode their inputs here, and the dataplanes' replay tests read the
// checked-in corpus files (ReadCorpus) and decode each entry here into the
// objects it feeds its target (NormalizeObjects and the other *Objects
// functions), to push them through the Builder into a real kernel. Were the
// decoding copied instead, a corpus entry could mean one thing to the model's
// fuzzer and another to the replay, and the replay would prove nothing about
// the states the fuzzer found.
//
// A corpus entry must keep meaning what it meant when it was found: the
// decoders here must not change what any input decodes to.
package fuzzobj
