"""What the operator knows about each supported model type: a table per runtime, pure data.

Two runtimes serve the model types (`Runtime`), each from its own table, one entry per model type it
serves; adding a model type means adding one entry to the table of each runtime that serves it. This
module only re-exports the public names of its modules. Pure data: imports nothing of ours outside the
package and does no I/O.

- `shared`: the runtimes, the model types, the modalities, the largest worlds and the shape of a known
  checkpoint's language model, which every table names;
- `triton`: the triton-trtllm-engine runtime's table (`KNOWLEDGE`): conversion, build and serving facts,
  the host memory of its pods' processes;
- `trtllm_serve`: the trtllm-serve runtime's table (`SERVE_KNOWLEDGE`): architectures, features, heads,
  checkpoints' sizes;
- `engine_path`: the engine runtime's end upstream, and the way off it per model type;
- `gpus`: common kinds of GPU by feature discovery's product name, with capability and memory;
- `lookups`: each runtime's table behind one face (`types_of`, `types_taking`, the largest worlds).
"""

from mmd_operator.knowledge.gpus import GPU_PRODUCTS as GPU_PRODUCTS
from mmd_operator.knowledge.gpus import GpuProduct as GpuProduct
from mmd_operator.knowledge.lookups import pipeline_types as pipeline_types
from mmd_operator.knowledge.lookups import types_by_largest_world as types_by_largest_world
from mmd_operator.knowledge.lookups import types_of as types_of
from mmd_operator.knowledge.lookups import types_taking as types_taking
from mmd_operator.knowledge.shared import LARGE_WORLD as LARGE_WORLD
from mmd_operator.knowledge.shared import LARGEST_SERVE_WORLD as LARGEST_SERVE_WORLD
from mmd_operator.knowledge.shared import NODE_WORLD as NODE_WORLD
from mmd_operator.knowledge.shared import LanguageModelShape as LanguageModelShape
from mmd_operator.knowledge.shared import Modality as Modality
from mmd_operator.knowledge.shared import ModelType as ModelType
from mmd_operator.knowledge.shared import Runtime as Runtime
from mmd_operator.knowledge.triton import KNOWLEDGE as KNOWLEDGE
from mmd_operator.knowledge.triton import MEL_FRAMES_PER_SECOND as MEL_FRAMES_PER_SECOND
from mmd_operator.knowledge.triton import WHISPER_SAMPLE_RATE as WHISPER_SAMPLE_RATE
from mmd_operator.knowledge.triton import BuildDefaults as BuildDefaults
from mmd_operator.knowledge.triton import HostMemory as HostMemory
from mmd_operator.knowledge.triton import ImageInput as ImageInput
from mmd_operator.knowledge.triton import LoraCacheDefaults as LoraCacheDefaults
from mmd_operator.knowledge.triton import ModelKnowledge as ModelKnowledge
from mmd_operator.knowledge.triton import RepositoryLayout as RepositoryLayout
from mmd_operator.knowledge.triton import ServingDefaults as ServingDefaults
from mmd_operator.knowledge.triton import VisionBatchRule as VisionBatchRule
from mmd_operator.knowledge.triton import VisionEngineRecipe as VisionEngineRecipe
from mmd_operator.knowledge.triton import WhisperVariant as WhisperVariant
from mmd_operator.knowledge.triton import knowledge_of as knowledge_of
from mmd_operator.knowledge.triton import types_where as types_where
from mmd_operator.knowledge.trtllm_serve import SERVE_KNOWLEDGE as SERVE_KNOWLEDGE
from mmd_operator.knowledge.trtllm_serve import ServeKnowledge as ServeKnowledge
from mmd_operator.knowledge.trtllm_serve import checkpoint_shapes as checkpoint_shapes
from mmd_operator.knowledge.trtllm_serve import serve_knowledge_of as serve_knowledge_of
from mmd_operator.knowledge.trtllm_serve import serve_types_where as serve_types_where
