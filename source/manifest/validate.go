package manifest

import "github.com/proxykit/proxykit/source/validation"

// checkObjects makes the Source's decoder check every object as the API
// server would on create, logging each it refuses with its file and line
// and counting it in proxykit_source_objects_refused_total{source="manifests"}.
func (s *Source) checkObjects() error {
	c, err := validation.NewChecker(validation.Config{
		Source:           "manifests",
		Mode:             validation.Create,
		Logger:           s.cfg.Logger,
		Registerer:       s.cfg.Registerer,
		MetricsNamespace: s.cfg.MetricsNamespace,
	})
	if err != nil {
		return err
	}
	s.decoder.checker = c
	return nil
}
