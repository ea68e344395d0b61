/** TEST-ONLY: GGUF files with a known defect, for the doctor's fault-injection tests (docs/doctor.md). */
import { writeGGUF, type TensorToWrite } from "../../src/gguf/writer.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { ggufToHf } from "../../src/convert/names.js";

export interface FileFault {
  /** metadata keys to delete (`{arch}` is replaced by the architecture) */
  readonly dropKeys?: readonly string[];
  /** tensor names mapped GGUF → Hugging Face (the name map applied in the wrong direction) */
  readonly hfNames?: boolean;
  /** multiply these tensors (F32 only) by a factor */
  readonly scale?: Readonly<Record<string, number>>;
  /** set these tensors' first value (F32 only) to NaN */
  readonly nanIn?: readonly string[];
}

/** Copy an F32/any-type GGUF with a defect (test-only). Returns the new path. */
export function writeFaultyFile(src: string, dst: string, fault: FileFault): string {
  const file = GGUFFile.open(src);
  try {
    const arch = file.metadata.string("general.architecture") ?? "";
    const meta = new Map<string, GGUFMetadataEntry>(file.metadata.entries);
    for (const k of fault.dropKeys ?? []) meta.delete(k.replace("{arch}", arch));
    const nExpert = file.metadata.integer(`${arch}.expert_count`) ?? 0;
    const tensors: TensorToWrite[] = [];
    for (const info of file.tensors.values()) {
      let data = file.readBytes(info);
      const factor = fault.scale?.[info.name];
      const nan = fault.nanIn?.includes(info.name) === true;
      if (factor !== undefined || nan) {
        if (info.type !== 0) throw new Error(`writeFaultyFile: ${info.name} is not F32`);
        const f = new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
        if (factor !== undefined) for (let i = 0; i < f.length; i++) f[i] *= factor;
        if (nan) f[0] = NaN;
        data = new Uint8Array(f.buffer);
      }
      let name = info.name;
      if (fault.hfNames === true) {
        // k_b and v_b are both halves of kv_b_proj: keep their names apart
        const hf = ggufToHf(info.name, nExpert)?.[0]?.replace(/\.experts\.0\./, ".experts.");
        name =
          hf === undefined
            ? info.name
            : info.name.endsWith("attn_v_b.weight")
              ? hf.replace("kv_b_proj", "kv_b_proj_v")
              : hf;
      }
      tensors.push({ name, ne: info.ne, type: info.type, data });
    }
    meta.set("general.name", {
      type: GGUFValueType.STRING,
      value: `${file.metadata.string("general.name") ?? "model"}-faulty`,
    });
    writeGGUF(dst, meta, tensors);
    return dst;
  } finally {
    file.close();
  }
}
