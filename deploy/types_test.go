package deploy

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The two custom resources without a Go module light enough to import: KEDA's
// ScaledObject (github.com/kedacore/keda/v2 brings a whole operator's
// dependencies) and kustomize's own files. These structs hold the fields
// their upstream types document, so that strict decoding rejects a misspelt
// or misplaced field as the API server or kustomize would.

// scaledObject is keda.sh/v1alpha1 ScaledObject (KEDA 2.x).
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef        *scaleTarget    `json:"scaleTargetRef"`
	PollingInterval       *int32          `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32          `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32          `json:"maxReplicaCount,omitempty"`
	Advanced              *kedaAdvanced   `json:"advanced,omitempty"`
	Triggers              []scaleTriggers `json:"triggers"`
	Fallback              *kedaFallback   `json:"fallback,omitempty"`
}

type scaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

type kedaAdvanced struct {
	HorizontalPodAutoscalerConfig *kedaHPAConfig       `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool                 `json:"restoreToOriginalReplicaCount,omitempty"`
	ScalingModifiers              *kedaScalingModifier `json:"scalingModifiers,omitempty"`
}

type kedaHPAConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
	Name     string                                         `json:"name,omitempty"`
}

type kedaScalingModifier struct {
	Formula          string `json:"formula,omitempty"`
	Target           string `json:"target,omitempty"`
	ActivationTarget string `json:"activationTarget,omitempty"`
	MetricType       string `json:"metricType,omitempty"`
}

type kedaFallback struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

type scaleTriggers struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
	MetricType string `json:"metricType,omitempty"`
}

// prometheusScalerKeys are the metadata keys KEDA's prometheus scaler reads.
var prometheusScalerKeys = map[string]bool{
	"serverAddress": true, "query": true, "queryParameters": true,
	"threshold": true, "activationThreshold": true, "namespace": true,
	"customHeaders": true, "ignoreNullValues": true, "unsafeSsl": true,
	"timeout": true,
}

// kustomization is kustomize.config.k8s.io Kustomization or Component, the
// fields these manifests may use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	NamePrefix string   `json:"namePrefix,omitempty"`
	Resources  []string `json:"resources,omitempty"`
	Components []string `json:"components,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path   string `json:"path,omitempty"`
		Patch  string `json:"patch,omitempty"`
		Target *struct {
			Group     string `json:"group,omitempty"`
			Version   string `json:"version,omitempty"`
			Kind      string `json:"kind,omitempty"`
			Name      string `json:"name,omitempty"`
			Namespace string `json:"namespace,omitempty"`
		} `json:"target,omitempty"`
	} `json:"patches,omitempty"`
}
