package kpconfig

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// Codecs decodes and encodes KubeProxyConfiguration. The scheme knows
// v1alpha1 alone: kube-proxy has no other external version.
type Codecs struct {
	scheme  *runtime.Scheme
	strict  serializer.CodecFactory
	lenient serializer.CodecFactory
}

// NewCodecs returns the codecs of kubeproxy.config.k8s.io/v1alpha1.
func NewCodecs() (*Codecs, error) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return &Codecs{
		scheme:  s,
		strict:  serializer.NewCodecFactory(s, serializer.EnableStrict),
		lenient: serializer.NewCodecFactory(s, serializer.DisableStrict),
	}, nil
}

// Decoded is a configuration file read with Decode.
type Decoded struct {
	Config *v1alpha1.KubeProxyConfiguration
	// Lenient, if set, is why strict decoding failed (an unknown or
	// duplicate field): kube-proxy then decodes leniently and warns, and
	// so does the agent.
	Lenient error
}

// ReadFile reads, decodes and defaults the configuration file at path.
func (c *Codecs) ReadFile(path string) (Decoded, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Decoded{}, err
	}
	d, err := c.Decode(data)
	if err != nil {
		return Decoded{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// Decode decodes a KubeProxyConfiguration (YAML or JSON) and applies
// kube-proxy's defaults to it.
func (c *Codecs) Decode(data []byte) (Decoded, error) {
	var d Decoded
	obj, gvk, err := c.strict.UniversalDeserializer().Decode(data, nil, nil)
	if runtime.IsStrictDecodingError(err) {
		d.Lenient = err
		obj, gvk, err = c.lenient.UniversalDeserializer().Decode(data, nil, nil)
		if err != nil {
			return Decoded{}, d.Lenient
		}
	}
	if err != nil {
		return Decoded{}, err
	}
	cfg, ok := obj.(*v1alpha1.KubeProxyConfiguration)
	if !ok {
		return Decoded{}, fmt.Errorf("%s is not a KubeProxyConfiguration", gvk)
	}
	Default(cfg)
	d.Config = cfg
	return d, nil
}

// Encode writes cfg as kubeproxy.config.k8s.io/v1alpha1 YAML.
func (c *Codecs) Encode(cfg *v1alpha1.KubeProxyConfiguration, w io.Writer) error {
	info, ok := runtime.SerializerInfoForMediaType(c.strict.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		return fmt.Errorf("no YAML serializer")
	}
	enc := c.strict.EncoderForVersion(info.Serializer, v1alpha1.SchemeGroupVersion)
	var b bytes.Buffer
	if err := enc.Encode(cfg, &b); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}
